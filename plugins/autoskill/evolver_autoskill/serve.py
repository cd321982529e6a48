"""``evolver serve``: an OpenAI-compatible chat-completions server in front of any evolver backend.

Per request: rewrite the conversation into a query, retrieve from the caller's skill bank, inject the
skills as a system message, answer with the backend. After the response is sent: log the conversation
(and the retrieval decisions) to the store and queue extraction on the background learner.

Endpoints: ``POST /v1/chat/completions`` (``stream`` too), ``GET /v1/models``, ``GET /health``,
``POST /v1/autoskill/feedback`` (``{"conversation_id", "score"}``: the outcome usage accounting uses).
The user scope is the ``X-Evolver-Scope`` header, else the request's ``user`` field, else "default";
``X-Evolver-Thread`` names the conversation a request belongs to (default: a hash of its first user turn).
With API keys configured (auth.py), every endpoint but ``/health`` needs ``Authorization: Bearer <key>``
and a key reaches only its own scopes (another one is a 403; naming none means the key's first). Every
request is checked before any work (request.py): a malformed or oversized one is a 4xx naming what is wrong.

Backends answer batches and most are not thread-safe, so requests go through :class:`Batcher`: one
thread that gathers the requests arriving within a few milliseconds into one ``generate`` call. A batch
whose call raises is answered again one request at a time, so a request that breaks the backend fails alone.
Backends return whole texts, so a streamed answer is sent as chunks once it is generated.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import queue
import socket
import sys
import threading
import time
import traceback
import uuid
from concurrent.futures import Future, InvalidStateError

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from evolver import Backend, BackendError, GenRequest, GenResult, Message
from evolver_autoskill import records
from evolver_autoskill.auth import Keys, bearer, check_exposure, normalize_scope
from evolver_autoskill.request import (Limits, Reject, check_scope_name, check_thread, load_json, parse_feedback,
                                       parse_request, read_body)
from evolver_autoskill.retrieval import Retrieval, render_skills


class LockedBackend(Backend):
    """One backend instance shared by threads (the batcher answering, the learner judging or gating):
    most backends are not thread-safe, so every call holds the instance's lock."""

    def __init__(self, inner, lock: threading.Lock | None = None):
        self.inner, self.lock = inner, lock or threading.Lock()
        self.name, self.model, self.scores_options = inner.name, inner.model, inner.scores_options

    def generate(self, requests):
        with self.lock:
            return self.inner.generate(requests)

    def choose(self, requests):
        with self.lock:
            return self.inner.choose(requests)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def close(self) -> None:
        self.inner.close()


class Batcher:
    def __init__(self, backend, max_batch: int = 8, wait_s: float = 0.005):
        self.backend, self.max_batch, self.wait_s = backend, max(1, max_batch), wait_s
        self._q: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="autoskill-batcher", daemon=True)
        self._thread.start()

    def submit(self, req: GenRequest) -> Future:
        fut: Future = Future()
        self._q.put((req, fut))
        return fut

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            batch = [item]
            deadline = time.perf_counter() + self.wait_s
            while len(batch) < self.max_batch:
                try:
                    nxt = self._q.get(timeout=max(0.0, deadline - time.perf_counter()))
                except queue.Empty:
                    break
                if nxt is None:
                    self._q.put(None)
                    break
                batch.append(nxt)
            try:
                results = self.backend.generate([r for r, _ in batch])
                if len(results) != len(batch):  # else some requests would wait forever
                    raise RuntimeError(f"the backend answered {len(results)} of {len(batch)} requests")
            except Exception as exc:
                failed = exc
            else:
                for (_, fut), res in zip(batch, results):
                    _settle(fut, res)
                continue
            if len(batch) == 1:
                _settle(batch[0][1], exc=failed)
            else:  # outside the except block, so each request's own error is not chained to the batch's
                self._one_by_one(batch)

    def _one_by_one(self, batch: list) -> None:
        """A batch's call raised: answer each request alone, so only a request that breaks the backend fails.
        A ``BackendError`` is systemic by contract (the model cannot load, the server is unreachable): once
        one request alone gets it, the rest of the batch get it too without another call, since retrying
        each would multiply an outage's wait by the batch size."""
        down: BackendError | None = None
        for req, fut in batch:
            if down is not None:
                _settle(fut, exc=down)
                continue
            try:
                _settle(fut, self.backend.generate([req])[0])
            except BackendError as exc:
                down = exc
                _settle(fut, exc=exc)
            except Exception as exc:
                _settle(fut, exc=exc)

    def close(self) -> None:
        self._q.put(None)
        self._thread.join(timeout=10)


def _settle(fut: Future, result=None, exc: BaseException | None = None) -> None:
    """Answer a waiting request; one whose client went away (its future cancelled) is skipped, so the
    batcher thread never dies of it."""
    try:
        fut.set_exception(exc) if exc is not None else fut.set_result(result)
    except InvalidStateError:
        pass


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    headers = {"www-authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status, headers=headers)


def resolve_scope(named: str | None, allowed: list[str] | None) -> str:
    """The scope a request works in: the one it names, checked against its key's scopes (``allowed``;
    None when the server has no keys), else the key's first, else "default"."""
    if allowed is None:
        return normalize_scope(named)
    if named is None:
        return allowed[0]
    scope = normalize_scope(named)
    if scope not in allowed:
        raise Reject(403, f"this API key may not use scope {scope!r} (its scopes: {', '.join(allowed)})",
                     "permission_error")
    return scope


def thread_id(scope: str, messages: list[dict]) -> str:
    """Requests of one multi-turn conversation share their first user turn: group them by it (a client
    that knows better sends ``X-Evolver-Thread``)."""
    first = next((m["content"] for m in messages if m["role"] == "user"), "")
    return hashlib.sha256(f"{scope}\0{first}".encode()).hexdigest()[:16]


def build_app(service, backend, model_name: str, max_batch: int = 8, batch_wait_s: float = 0.005,
              autoskill: bool = True, keys: Keys | None = None, limits: Limits | None = None) -> Starlette:
    """``autoskill=False`` serves the bare backend through the same code path (for side-by-side benches).
    ``keys``: who may call and which scopes each reaches (None or empty: open, for loopback only).
    ``limits``: per-request limits (default: the option defaults)."""
    batcher = Batcher(backend, max_batch, batch_wait_s)
    limits = limits or Limits.from_options()

    def authenticate(request: Request) -> list[str] | None:
        """The key's scopes; None when the server has no keys (anyone may name any scope)."""
        if not keys:
            return None
        token = bearer(request.headers.get("authorization"))
        if token is None:
            raise Reject(401, "this server needs an API key: send `Authorization: Bearer <key>`",
                         "authentication_error")
        scopes = keys.scopes_for(token)
        if scopes is None:
            raise Reject(401, "unknown API key", "authentication_error")
        return scopes

    async def admit(request: Request):
        """Everything checked before any work: key, size, nesting, fields, scope, thread."""
        allowed = authenticate(request)
        chat_req = parse_request(load_json(await read_body(request, limits), limits), limits)
        named = check_scope_name(request.headers.get("x-evolver-scope"), "X-Evolver-Scope") or chat_req.user
        scope = resolve_scope(named, allowed)
        thread = check_thread(request.headers.get("x-evolver-thread")) or thread_id(scope, chat_req.messages)
        return chat_req, scope, thread

    async def chat(request: Request):
        started = time.perf_counter()
        try:
            chat_req, scope, thread = await admit(request)
        except Reject as r:
            return _error(r.status, r.message, r.kind)
        messages = chat_req.messages
        conv_id = uuid.uuid4().hex
        injected, query, retrieval = [], "", None
        prompt = [Message(m["role"], m["content"]) for m in messages]
        if autoskill:
            try:
                _, retrieval = await asyncio.to_thread(service.prepare, messages, scope, conv_id, False)
            except Exception as exc:  # a broken skill layer must not stop answers: answer without skills
                print(f"evolver serve: skill retrieval failed for scope {scope!r}, answering without skills: "
                      f"{exc!r}", file=sys.stderr)
                retrieval = Retrieval(query="", injected=[])
            query, injected = retrieval.query, retrieval.names
            block = render_skills(retrieval.injected)
            if block:
                prompt.insert(0, Message("system", block))
        req = GenRequest(messages=prompt, **chat_req.gen)
        try:
            res: GenResult = await asyncio.wrap_future(batcher.submit(req))
        except BackendError as exc:
            return _error(503, f"backend unavailable: {exc}", "server_error")
        except Exception as exc:  # this request broke the backend; the batcher kept it from the others
            print(f"evolver serve: the backend raised on request {conv_id}:\n{traceback.format_exc(limit=5)}",
                  file=sys.stderr)
            return _error(500, f"the backend failed on this request ({type(exc).__name__}); "
                               "no other request was affected", "server_error")
        if res.error:
            return _error(502, f"the backend failed on this request: {res.error}", "server_error")
        latency = time.perf_counter() - started
        after = BackgroundTask(_after, service, conv_id, thread, scope, model_name, messages, res.text, retrieval,
                               latency) if autoskill else None
        usage = {"prompt_tokens": res.prompt_tokens, "completion_tokens": res.completion_tokens,
                 "total_tokens": res.prompt_tokens + res.completion_tokens}
        extra = {"scope": scope, "skills": injected, "query": query}
        headers = {"x-evolver-conversation": conv_id, "x-evolver-skills": ",".join(injected)}
        if chat_req.stream:
            return StreamingResponse(_chunks(conv_id, model_name, res.text, usage if chat_req.include_usage else None),
                                     media_type="text/event-stream", headers=headers, background=after)
        return JSONResponse({"id": f"chatcmpl-{conv_id}", "object": "chat.completion", "created": int(time.time()),
                             "model": model_name, "choices": [{"index": 0, "finish_reason": "stop",
                                                               "message": {"role": "assistant", "content": res.text}}],
                             "usage": usage, "evolver": extra}, headers=headers, background=after)

    async def models(request: Request):
        try:
            authenticate(request)
        except Reject as r:
            return _error(r.status, r.message, r.kind)
        return JSONResponse({"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "evolver"}]})

    async def health(request: Request):
        return JSONResponse({"ok": True, "model": model_name, "autoskill": autoskill})

    async def feedback(request: Request):
        if not autoskill:
            return _error(404, "feedback needs the skill layer: this server runs with --bare")
        try:
            allowed = authenticate(request)
            cid, score = parse_feedback(load_json(await read_body(request, limits), limits))
        except Reject as r:
            return _error(r.status, r.message, r.kind)
        # A key scores only conversations of its scopes; another's reads as not found (its id is no oracle).
        found = await asyncio.to_thread(records.set_feedback, service.store, cid, score, allowed)
        return JSONResponse({"ok": found}, status_code=200 if found else 404)

    async def internal(request: Request, exc: Exception):
        """A bug, not the client's fault: a JSON 500 without the traceback (that goes to the server's log)."""
        return _error(500, f"internal error ({type(exc).__name__}); the server log has the details", "server_error")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                            Route("/v1/models", models), Route("/health", health),
                            Route("/v1/autoskill/feedback", feedback, methods=["POST"])],
                    exception_handlers={Exception: internal})
    app.state.batcher = batcher
    app.state.keys = keys
    return app


def _after(service, conv_id, tid, scope, model_name, messages, text, retrieval, latency) -> None:
    """After the response went out: the retrieval decisions and the conversation to the store,
    extraction to the learner."""
    service.log_retrieval(scope, conv_id, retrieval)
    if service.store is not None:
        records.log_conversation(service.store, conv_id, tid, service.bank(scope).scope, model_name,
                                 messages + [{"role": "assistant", "content": text}], text, retrieval.query,
                                 retrieval.names, latency)
    service.submit(messages, scope, [f"conversation:{conv_id}"])


async def _chunks(conv_id: str, model: str, text: str, usage: dict | None):
    base = {"id": f"chatcmpl-{conv_id}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def event(delta: dict, finish=None, **extra) -> str:
        return "data: " + json.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                                      **extra}) + "\n\n"
    yield event({"role": "assistant", "content": ""})
    # Word-sized chunks with their spaces kept, so the joined deltas are exactly the text.
    words = text.split(" ")
    for i, word in enumerate(words):
        if i == 0 and not word:
            continue
        yield event({"content": word if i == 0 else " " + word})
    yield event({}, "stop")
    if usage is not None:
        yield "data: " + json.dumps({**base, "choices": [], "usage": usage}) + "\n\n"
    yield "data: [DONE]\n\n"


def bind(host: str, port: int) -> socket.socket:
    """Bind before starting uvicorn, so ``--port 0`` works and the printed address is the real one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it. Without it h11 writes headers and body separately and Nagle plus
    # delayed ACKs add ~40 ms to every keep-alive response (measured: 44 ms -> 0.5 ms per GET).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port} ({exc.strerror}); "
                      "pick another --port (0 = any free one)") from None
    # Listen now, not when uvicorn starts: a client that read the printed address may connect at once,
    # and its connection must wait in the backlog rather than be refused.
    sock.listen(2048)
    return sock


class Server:
    """uvicorn on a pre-bound socket; ``start()`` in a thread (tests, benches) or ``run()`` blocking (CLI)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 8000):
        import uvicorn

        check_exposure(host, getattr(app.state, "keys", None))  # an open server listens on loopback only
        self.sock = bind(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def run(self) -> None:
        self.server.run(sockets=[self.sock])

    def start(self) -> "Server":
        self._thread = threading.Thread(target=self.run, name="evolver-serve", daemon=True)
        self._thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            if time.time() > deadline or not self._thread.is_alive():
                raise RuntimeError("evolver serve did not start within 30 s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.sock.close()
