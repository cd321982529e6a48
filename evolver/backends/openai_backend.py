"""Backend for any OpenAI-compatible chat-completions server (vLLM, llama.cpp, Ollama, hosted APIs).

Plain HTTP through httpx rather than the ``openai`` package: one POST endpoint does not justify a
dependency, and we want our own retry policy:
- connection failures, 429 and 5xx are retried with exponential backoff;
- a 4xx other than 429 is that request's fault: it becomes ``GenResult.error``, the batch goes on;
- a server that stays unreachable after the retries is systemic: ``BackendError`` naming the URL.
A batch's requests run concurrently on a thread pool (servers batch concurrent requests themselves).
A request's ``tools`` and ``tool_choice`` go to the server as OpenAI's own fields, and its ``tool_calls``
come back as ``GenResult.tool_calls``.
"""
from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from evolver.backends.base import Backend
from evolver.errors import BackendError
from evolver.tool_calls import CHOICES, ToolSchemaError, check_tools, choice_of
from evolver.types import GenRequest, GenResult

import httpx

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


class OpenAIBackend(Backend):
    name = "openai"

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None,
                 timeout_s: float = 60, max_retries: int = 3, concurrency: int = 8,
                 backoff_s: float = 0.5, **_: Any):
        self.model_name = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.model = f"openai:{model}@{self.base_url}"
        self.max_retries = max(0, int(max_retries))
        self.concurrency = max(1, int(concurrency))
        self.backoff_s = backoff_s
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers,
                                    limits=httpx.Limits(max_connections=self.concurrency))

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        if len(requests) <= 1:
            return [self._one(r) for r in requests]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as pool:
            return list(pool.map(self._one, requests))  # re-raises a worker's BackendError here

    def _one(self, req: GenRequest) -> GenResult:
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": [{"role": m.role, "content": m.content} for m in req.messages],
            "max_tokens": req.max_tokens,
            "temperature": req.temperature,
        }
        if req.stop:
            body["stop"] = list(req.stop)
        if req.seed is not None:
            body["seed"] = req.seed
        if req.logprobs:
            body["logprobs"] = True
        if req.tools:
            try:
                body["tools"] = check_tools(list(req.tools))
                choice = choice_of(req.tool_choice, body["tools"])
            except ToolSchemaError as exc:
                return GenResult(text="", error=f"tools rejected: {exc}")
            # OpenAI's own words, a tool's name as {"type": "function", "function": {"name": ...}}
            body["tool_choice"] = choice if choice in CHOICES else {"type": "function", "function": {"name": choice}}
        status, data, err = self._post("/chat/completions", body)
        prompt_chars = sum(len(m.content) for m in req.messages)
        if err is not None:
            return GenResult(text="", prompt_tokens=max(1, prompt_chars // 4), error=err)
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            return GenResult(text="", error=f"malformed response from {self.base_url}: {str(data)[:200]}")
        # Servers differ on whether the stop string is included; cut it so all backends agree.
        cuts = [text.find(s) for s in req.stop or [] if s and s in text]
        text = text[:min(cuts)] if cuts else text
        usage = data.get("usage") or {}
        res = GenResult(text=text,
                        prompt_tokens=int(usage.get("prompt_tokens") or max(1, prompt_chars // 4)),
                        completion_tokens=int(usage.get("completion_tokens") or max(1, len(text) // 4)))
        calls = choice["message"].get("tool_calls") if isinstance(choice.get("message"), dict) else None
        if req.tools and isinstance(calls, list):
            res.tool_calls = [c for c in map(_tool_call, calls) if c]
        content = ((choice.get("logprobs") or {}).get("content")) if req.logprobs else None
        if content:
            res.logprobs = [float(t.get("logprob", 0.0)) for t in content]
        return res

    def _post(self, path: str, body: dict) -> tuple[int, Any, str | None]:
        """POST with retries. Returns (status, json, per-request error or None)."""
        url = self.base_url + path
        last_exc: Exception | None = None
        last_err = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                resp = self._client.post(url, json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                last_exc, last_err = exc, ""
                continue
            except httpx.TransportError as exc:  # read timeout, dropped connection: retry, then blame the request
                last_exc, last_err = None, f"{type(exc).__name__}: {exc}"
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                last_exc, last_err = None, f"HTTP {resp.status_code}: {_message(resp)}"
                continue
            if resp.status_code >= 400:
                return resp.status_code, None, f"HTTP {resp.status_code}: {_message(resp)}"
            try:
                return resp.status_code, resp.json(), None
            except ValueError:
                return resp.status_code, None, f"non-JSON response from {url}: {resp.text[:200]}"
        if last_exc is not None:
            raise BackendError(f"cannot reach {url} after {self.max_retries + 1} attempts "
                               f"({type(last_exc).__name__}: {last_exc}); is the server running? "
                               "set base_url or OPENAI_BASE_URL")
        return 0, None, f"{last_err} (after {self.max_retries + 1} attempts)"

    def close(self) -> None:
        self._client.close()


def _message(resp: Any) -> str:
    """The server's error message if it sent the OpenAI error shape, else the start of the body."""
    try:
        err = resp.json().get("error")
        if isinstance(err, dict):
            return str(err.get("message", err))[:300]
        if err:
            return str(err)[:300]
    except (ValueError, AttributeError):
        pass
    return resp.text[:300]


def _tool_call(call) -> dict | None:
    """An OpenAI ``tool_calls`` entry as ``{"name", "arguments"}`` (arguments parsed from their JSON text)."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        return None
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args or "{}")
        except ValueError:
            pass  # kept as the raw string: the env says what was wrong with it
    return {"name": fn["name"], "arguments": args if args is not None else {}}
