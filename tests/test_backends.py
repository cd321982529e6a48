"""Backends: scripted and OpenAI-compatible HTTP (against a real local server). The transformers
backend and the embedded-model locator are tested with their plugin (plugins/transformers/tests)."""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evolver.backends.scripted import ScriptedBackend, ScriptExhausted
from evolver.errors import BackendError
from evolver.types import ChoiceRequest, GenRequest, GenResult, Message


def user(text: str) -> list[Message]:
    return [Message("user", text)]


# ------------------------------------------------------------------------------------- scripted
def test_scripted_answers_in_order_then_raises():
    b = ScriptedBackend(answers=["one", "two words"])
    out = b.generate([GenRequest(user("a")), GenRequest(user("b c"))])
    assert [o.text for o in out] == ["one", "two words"]
    assert [o.completion_tokens for o in out] == [1, 2]
    assert out[1].prompt_tokens == 2
    assert [c.messages[0].content for c in b.calls] == ["a", "b c"]
    with pytest.raises(ScriptExhausted, match="ran out of answers after 2 calls"):
        b.generate([GenRequest(user("d"))])


def test_scripted_rule_stop_and_result_passthrough():
    b = ScriptedBackend(answers=[GenResult(text="", error="boom")], rule=lambda r: f"echo {r.messages[-1].content}. END more")
    first, second = b.generate([GenRequest(user("x")), GenRequest(user("hi"), stop=[" END"])])
    assert first.error == "boom"
    assert second.text == "echo hi."


def test_scripted_choose_with_rule_and_fallback():
    b = ScriptedBackend(rule=lambda r: "go north" if "north" in r.messages[-1].content else "opne door")
    res = b.choose([ChoiceRequest(user("north?"), ["look", "go north"]),
                    ChoiceRequest(user("door?"), ["open door", "look"])])
    assert res[0].index == 1 and res[0].scores == [0.0, 1.0]
    assert res[1].index == 0  # not an option verbatim: generate + closest match
    assert len(b.choice_calls) == 2


def test_scripted_choose_from_queue():
    b = ScriptedBackend(answers=["take apple"])
    assert b.choose([ChoiceRequest(user("?"), ["look", "take apple", "take pear"])])[0].index == 1


def test_a_written_choice_runs_a_few_tokens_past_the_longest_option_and_no_further():
    b = ScriptedBackend(answers=["take the red apple from the table and then eat it", "look"])
    got = b.choose([ChoiceRequest(user("?"), ["look", "take red apple"], write=True),
                    ChoiceRequest(user("?"), ["a " * 40], write=True)])
    assert [c.max_tokens for c in b.calls] == [3 + 4, 32]  # word counts here; capped at 32
    assert got[0].index == 1 and got[1].index == 0


def test_choices_written_name_their_options_as_drafts():
    backend = ScriptedBackend(answers=["go north"])
    backend.choose_by_writing([ChoiceRequest(messages=user("where?"), options=["go north", "go south"])])
    assert backend.calls[0].drafts == ["go north", "go south"]


# ----------------------------------------------------------------------------------- openai
class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_POST(self):  # noqa: N802 - http.server API
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv.seen.append((self.path, self.headers.get("Authorization"), body))
        content = body["messages"][-1]["content"]
        if self.path != "/v1/chat/completions":
            return self._send(404, {"error": {"message": "no such route"}})
        if content == "bad":
            return self._send(400, {"error": {"message": "bad request, really"}})
        if content == "flaky":
            with srv.lock:
                srv.flaky += 1
                n = srv.flaky
            if n <= 2:
                return self._send(500, {"error": {"message": "try again"}})
        if content.startswith("slow"):
            time.sleep(0.3)
        if body.get("tools"):  # call the first tool offered, its arguments as JSON text (as OpenAI does)
            name = body["tools"][0]["function"]["name"]
            calls = [{"id": "c1", "type": "function", "function": {"name": name, "arguments": '{"order": 7}'}},
                     {"id": "c2", "type": "function", "function": {"name": name, "arguments": "{not json"}}]
            return self._send(200, {"choices": [{"message": {"role": "assistant", "content": None,
                                                             "tool_calls": calls}}]})
        text = f"echo: {content} STOP tail"
        self._send(200, {"choices": [{"message": {"role": "assistant", "content": text}}],
                         "usage": {"prompt_tokens": 11, "completion_tokens": 3}})

    def _send(self, code, payload):
        raw = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def chat_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.seen, srv.flaky, srv.lock = [], 0, threading.Lock()
    srv.timeout = 5
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=5)


def test_openai_generate_retries_and_per_request_errors(chat_server):
    from evolver.backends.openai_backend import OpenAIBackend

    srv, url = chat_server
    b = OpenAIBackend(model="tiny", base_url=url, api_key="k", backoff_s=0.01, timeout_s=5)
    assert b.model == f"openai:tiny@{url}"
    out = b.generate([GenRequest(user("hello"), stop=[" STOP"], seed=3), GenRequest(user("bad")),
                      GenRequest(user("flaky"))])
    assert out[0].text == "echo: hello" and out[0].error is None
    assert (out[0].prompt_tokens, out[0].completion_tokens) == (11, 3)
    assert out[1].text == "" and "400" in out[1].error and "bad request, really" in out[1].error
    assert out[2].text.startswith("echo: flaky") and srv.flaky == 3  # two 500s, then success
    first = next(body for _p, _a, body in srv.seen if body["messages"][-1]["content"] == "hello")
    assert first["stop"] == [" STOP"] and first["seed"] == 3 and first["model"] == "tiny"
    assert all(auth == "Bearer k" for _p, auth, _b in srv.seen)
    b.close()


def test_openai_passes_tools_and_returns_structured_calls(chat_server):
    from evolver.backends.openai_backend import OpenAIBackend

    srv, url = chat_server
    tools = [{"type": "function", "function": {"name": "refund", "description": "Refund an order.",
                                               "parameters": {"type": "object", "properties": {"order": {}}}}}]
    b = OpenAIBackend(model="tiny", base_url=url, backoff_s=0.01, timeout_s=5)
    (with_tools,), (plain,) = b.generate([GenRequest(user("refund 7"), tools=tools)]), b.generate([GenRequest(user("hi"))])
    assert with_tools.text == "" and with_tools.tool_calls == [{"name": "refund", "arguments": {"order": 7}},
                                                               {"name": "refund", "arguments": "{not json"}]
    assert srv.seen[0][2]["tools"] == tools and "tools" not in srv.seen[1][2] and plain.tool_calls is None
    assert srv.seen[0][2]["tool_choice"] == "auto" and "tool_choice" not in srv.seen[1][2]
    b.generate([GenRequest(user("refund 7"), tools=tools, tool_choice="required")])  # (one at a time: in order)
    b.generate([GenRequest(user("refund 7"), tools=tools, tool_choice="refund")])
    assert srv.seen[2][2]["tool_choice"] == "required"
    assert srv.seen[3][2]["tool_choice"] == {"type": "function", "function": {"name": "refund"}}
    bad, = b.generate([GenRequest(user("refund 7"), tools=[{"function": {"name": "no spaces"}}])])
    assert bad.text == "" and "tools rejected" in bad.error and len(srv.seen) == 4  # never sent
    b.close()


def test_openai_persistent_5xx_is_a_request_error(chat_server):
    from evolver.backends.openai_backend import OpenAIBackend

    srv, url = chat_server
    b = OpenAIBackend(model="tiny", base_url=url, max_retries=1, backoff_s=0.01)
    res = b.generate([GenRequest(user("flaky"))])[0]  # 500, 500: retries (1) exhausted
    assert res.text == "" and "500" in res.error and srv.flaky == 2


def test_openai_runs_batch_concurrently(chat_server):
    from evolver.backends.openai_backend import OpenAIBackend

    _srv, url = chat_server
    b = OpenAIBackend(model="tiny", base_url=url, concurrency=8)
    start = time.monotonic()
    out = b.generate([GenRequest(user(f"slow {i}")) for i in range(8)])
    assert [o.text.split(" STOP")[0] for o in out] == [f"echo: slow {i}" for i in range(8)]
    assert time.monotonic() - start < 8 * 0.3 * 0.6  # sequential would take 2.4 s


def test_openai_unreachable_raises_backend_error():
    from evolver.backends.openai_backend import OpenAIBackend

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    b = OpenAIBackend(model="m", base_url=url, max_retries=1, backoff_s=0.01, timeout_s=2)
    with pytest.raises(BackendError, match=f"127.0.0.1:{port}"):
        b.generate([GenRequest(user("hi"))])
