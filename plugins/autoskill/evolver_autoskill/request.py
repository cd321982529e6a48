"""What ``evolver serve`` accepts, checked before any work: the body's size, its JSON nesting (before it is
parsed), and every field of a chat-completions request, strictly. Anything else is a :class:`Reject`: a 4xx
whose message names the field or the limit (and the option that sets it), never a 500.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import numpy as np

ROLES = ("system", "user", "assistant", "developer", "tool")
MAX_STOP = 4  # as OpenAI's API
MAX_SCOPE_CHARS = 128
MAX_THREAD_CHARS = 128
SEED_RANGE = (-2**63, 2**63)  # what torch and the HTTP backends take
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")


class Reject(Exception):
    """A request the server refuses: ``status`` and a message for the client."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


@dataclass(frozen=True)
class Limits:
    """Per-request limits: the ``[plugins.autoskill]`` options of the same names (defaults and reasons there)."""

    max_body_bytes: int
    max_json_depth: int
    max_request_tokens: int
    max_temperature: float
    max_messages: int
    max_chars: int

    @classmethod
    def from_options(cls, options=None) -> "Limits":
        from evolver_autoskill.options import AutoSkillOptions

        options = options or AutoSkillOptions()
        return cls(**{name: getattr(options, name) for name in cls.__dataclass_fields__})


@dataclass
class ChatRequest:
    messages: list[dict]
    gen: dict  # GenRequest keyword arguments: max_tokens, temperature, stop, seed
    stream: bool = False
    include_usage: bool = False
    user: str | None = None


async def read_body(request, limits: Limits) -> bytes:
    """The body, refused with 413 as soon as it is known to be over ``max_body_bytes``."""
    too_big = Reject(413, f"the body is over this server's limit of {limits.max_body_bytes} bytes "
                          "(plugins.autoskill.max_body_bytes)")
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise Reject(400, "Content-Length is not a number")
        if int(declared) > limits.max_body_bytes:
            raise too_big
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limits.max_body_bytes:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


def json_depth(raw: bytes) -> int:
    """How deeply arrays and objects nest in a JSON text, without parsing it: brackets inside strings are
    dropped first (UTF-8 never puts an ASCII byte inside a multi-byte character), then a running sum. Linear
    and in C or numpy throughout, so a 1 MB body costs a few milliseconds whatever its shape."""
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", raw))
    if not brackets:
        return 0
    b = np.frombuffer(brackets, dtype=np.uint8)
    steps = np.where((b == ord("[")) | (b == ord("{")), 1, -1).astype(np.int32)
    return int(np.cumsum(steps).max())


def load_json(raw: bytes, limits: Limits):
    depth = json_depth(raw)
    if depth > limits.max_json_depth:
        raise Reject(400, f"the JSON nests {depth} levels deep, over this server's limit of {limits.max_json_depth} "
                          "(plugins.autoskill.max_json_depth)")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, an int over 4300 digits
        raise Reject(400, f"the body is not JSON ({str(exc)[:200]}): send {{\"model\": ..., \"messages\": [...]}}") \
            from None


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _content(i: int, role: str, content) -> str:
    """OpenAI content: a string, or a list of text parts (``{"type": "text", "text": "..."}``)."""
    if isinstance(content, str):
        return content
    if content is None and role in ("assistant", "tool"):  # an assistant turn that only called tools
        return ""
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise Reject(400, f"messages[{i}].content[{j}]: only text parts are supported: "
                                  '{"type": "text", "text": "..."}')
            if not isinstance(part.get("text"), str):
                raise Reject(400, f"messages[{i}].content[{j}].text must be a string")
            texts.append(part["text"])
        return "\n".join(texts)
    raise Reject(400, f"messages[{i}].content must be a string or a list of text parts")


def _messages(raw, limits: Limits) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise Reject(400, "`messages` must be a non-empty list of {role, content} objects")
    if len(raw) > limits.max_messages:
        raise Reject(400, f"{len(raw)} messages, over this server's limit of {limits.max_messages} "
                          "(plugins.autoskill.max_messages)")
    messages, chars = [], 0
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise Reject(400, f"messages[{i}] must be an object with `role` and `content`")
        if m.get("role") not in ROLES:
            raise Reject(400, f"messages[{i}]: needs a role of system, user, assistant (or developer, tool)")
        text = _content(i, m["role"], m.get("content"))
        chars += len(text)
        messages.append({"role": "system" if m["role"] == "developer" else m["role"], "content": text})
    if chars > limits.max_chars:
        raise Reject(400, f"the messages hold {chars} characters, over this server's limit of {limits.max_chars} "
                          "(plugins.autoskill.max_chars)")
    return messages


def _max_tokens(body: dict, limits: Limits) -> int:
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    value = body.get(name)
    if value is None:
        return min(256, limits.max_request_tokens)
    if not _is_int(value) or value < 1:
        raise Reject(400, f"`{name}` must be a positive integer")
    if value > limits.max_request_tokens:
        raise Reject(400, f"`{name}` {value} is over this server's limit of {limits.max_request_tokens} "
                          "(plugins.autoskill.max_request_tokens)")
    return value


def _temperature(body: dict, limits: Limits) -> float:
    value = body.get("temperature")
    if value is None:
        return 0.0
    if not _is_number(value) or not math.isfinite(value) or not 0 <= value <= limits.max_temperature:
        raise Reject(400, f"`temperature` must be a finite number in [0, {limits.max_temperature}] "
                          "(plugins.autoskill.max_temperature)")
    return float(value)


def _stop(value) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and len(value) <= MAX_STOP and all(isinstance(s, str) for s in value):
        return list(value) or None
    raise Reject(400, f"`stop` must be a string or a list of at most {MAX_STOP} strings")


def _seed(value) -> int | None:
    if value is None:
        return None
    if not _is_int(value) or not SEED_RANGE[0] <= value < SEED_RANGE[1]:
        raise Reject(400, "`seed` must be an integer that fits in 64 bits")
    return value


def check_scope_name(value, where: str) -> str | None:
    """A scope named by a request (``user`` or ``X-Evolver-Scope``): a short string, or None for none."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_SCOPE_CHARS or any(ord(c) < 32 for c in value):
        raise Reject(400, f"{where} must be a string of at most {MAX_SCOPE_CHARS} printable characters "
                          "(it selects the skill bank)")
    return value.strip() or None


def check_thread(value: str | None) -> str | None:
    if value is not None and (len(value) > MAX_THREAD_CHARS or not value.strip()):
        raise Reject(400, f"X-Evolver-Thread must be 1 to {MAX_THREAD_CHARS} characters")
    return value


def parse_request(body, limits: Limits | None = None) -> ChatRequest:
    """A chat-completions body, validated field by field; a :class:`Reject` (400) names the first bad one.
    Fields this server does not use (``top_p``, ``tools``, ...) are ignored, as before."""
    limits = limits or Limits.from_options()
    if not isinstance(body, dict):
        raise Reject(400, "the body must be a JSON object with `model` and `messages`")
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise Reject(400, "`model` must be a string")
    messages = _messages(body.get("messages"), limits)
    n = body.get("n")
    if n is not None and (not _is_int(n) or n < 1):
        raise Reject(400, "`n` must be a positive integer")
    if n not in (None, 1):
        raise Reject(400, "`n` > 1 is not supported: send the request n times")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise Reject(400, "`stream` must be true or false")
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict)
                                or not isinstance(options.get("include_usage", False), bool)):
        raise Reject(400, '`stream_options` must be an object like {"include_usage": true}')
    gen = {"max_tokens": _max_tokens(body, limits), "temperature": _temperature(body, limits),
           "stop": _stop(body.get("stop")), "seed": _seed(body.get("seed"))}
    return ChatRequest(messages, gen, stream=bool(stream), include_usage=bool((options or {}).get("include_usage")),
                       user=check_scope_name(body.get("user"), "`user`"))


def parse_feedback(body) -> tuple[str, float]:
    """``{"conversation_id": <the response's id>, "score": <finite number>}``."""
    usage = "send {\"conversation_id\": <id from the response>, \"score\": <number>}"
    if not isinstance(body, dict) or not isinstance(body.get("conversation_id"), str):
        raise Reject(400, usage)
    score = body.get("score")
    if not _is_number(score) or not math.isfinite(score):
        raise Reject(400, usage + ": `score` must be a finite number")
    return body["conversation_id"].removeprefix("chatcmpl-")[:64], float(score)
