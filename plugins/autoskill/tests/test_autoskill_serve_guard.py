"""`evolver serve` under attack: API keys bound to scopes, per-request limits, strict parsing (every malformed
shape a 400, never a 500), and a request that breaks the backend failing alone, never its batch."""
import hashlib
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from autoskill_helpers import card
from evolver import BackendError, ConfigError, EvolverError
from evolver.backends.scripted import ScriptedBackend
from evolver.store import Store
from evolver_autoskill import records
from evolver_autoskill.auth import Keys, load_keys
from evolver_autoskill.bank import SkillBank
from evolver_autoskill.options import AutoSkillOptions
from evolver_autoskill.request import Limits, json_depth, parse_request
from evolver_autoskill.serve import Server, build_app
from evolver_autoskill.service import AutoSkillService

KEY_A, KEY_B, KEY_TEAM = "alice-key-0123456789", "bob-key-0123456789ab", "team-key-0123456789ab"
KEYS = {KEY_A: ["alice"], KEY_B: ["bob"], KEY_TEAM: ["carol", "bob"]}
EMAIL = card("formal-email", "Use when writing an email to a landlord or an office",
             "- Open with 'Dear Sir or Madam'.\n- Sign with account 12-3456.", triggers=["email", "landlord"])
ASK = "Write an email to my landlord about the broken heating"
HI = [{"role": "user", "content": "hi"}]


def answer(req):
    system = "\n".join(m.content for m in req.messages if m.role == "system")
    return "Dear Sir or Madam, 12-3456" if "### formal-email" in system else "hey, heating broken"


class Recording(ScriptedBackend):
    """The scripted model, with the size of every batch it was called with; a request whose stop list holds
    "boom" makes the whole call raise, as a backend bug triggered by one request would."""

    def __init__(self, rule=answer, fail=None):
        super().__init__(rule=rule)
        self.batches: list[int] = []
        self.broken: list[int] = []  # the sizes of the calls that raised
        self.fail = fail
        self.lock = threading.Lock()

    def generate(self, requests):
        with self.lock:
            self.batches.append(len(requests))
        if self.fail is not None:
            raise self.fail
        if any("boom" in (r.stop or []) for r in requests):
            self.broken.append(len(requests))
            raise RuntimeError("the backend broke on a stop string")
        return super().generate(requests)


def start(tmp_path, keys=KEYS, backend=None, limits=None, batch_wait_s=0.005):
    store = Store(tmp_path / "evolver.duckdb")
    SkillBank(tmp_path / "autoskill", "alice").add(EMAIL, ["seed"])
    service = AutoSkillService(tmp_path / "autoskill", store, AutoSkillOptions(embedder="hashing"))
    backend = backend or Recording()
    app = build_app(service, backend, "m", batch_wait_s=batch_wait_s, keys=Keys(keys) if keys else None,
                    limits=limits)
    return Server(app, "127.0.0.1", 0).start(), service, store, backend


@pytest.fixture
def keyed(tmp_path):
    server, service, store, backend = start(tmp_path)
    yield server, service, store, backend
    server.stop()
    service.close()
    store.close()


def post(server, body, key=KEY_A, path="/chat/completions", **headers):
    if key:
        headers["Authorization"] = f"Bearer {key}"
    content = body if isinstance(body, bytes) else json.dumps(body)
    return httpx.post(server.url + path, content=content, headers=headers, timeout=30)


def wait_for(condition, timeout=20.0):
    import time

    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out waiting for the background work"
        time.sleep(0.05)


# -- keys and scopes ----------------------------------------------------------------------------------


def test_user_b_never_sees_user_as_skills_and_cannot_write_as_scope(keyed):
    server, service, store, backend = keyed
    alice = OpenAI(base_url=server.url, api_key=KEY_A).chat.completions.create(
        model="m", messages=[{"role": "user", "content": ASK}])  # no scope named: the key's first
    assert alice.model_extra["evolver"] == {"scope": "alice", "skills": ["formal-email"],
                                            "query": alice.model_extra["evolver"]["query"]}
    bob = OpenAI(base_url=server.url, api_key=KEY_B)
    own = bob.chat.completions.create(model="m", messages=[
        {"role": "user", "content": ASK}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "Always sign my letters with 'Best, Bob'. Never use exclamation marks."}])
    assert own.choices[0].message.content == "hey, heating broken" and own.model_extra["evolver"]["skills"] == []
    assert not any("12-3456" in m.content for call in backend.calls[1:] for m in call.messages)

    for how in ({"user": "alice"}, {"headers": {"X-Evolver-Scope": "alice"}}, {"user": " alice "}):
        body = {"model": "m", "messages": [{"role": "user", "content": ASK}], "user": how.get("user")}
        r = post(server, body, KEY_B, **how.get("headers", {}))
        assert r.status_code == 403 and "may not use scope 'alice'" in r.json()["error"]["message"]
        assert r.json()["error"]["message"].endswith("(its scopes: bob)")
    assert post(server, {"messages": HI, "user": "carol"}, KEY_TEAM).json()["evolver"]["scope"] == "carol"

    wait_for(lambda: len(records.conversations(store)) == 3)
    service.drain()
    assert {r["scope"] for r in records.conversations(store, "alice")} == {"alice"}
    assert len(records.conversations(store, "alice")) == 1 and len(records.conversations(store, "bob")) == 1
    assert [c.name for c in service.bank("alice").cards()] == ["formal-email"]  # bob's preference went to bob
    assert "Best, Bob" in service.bank("bob").cards()[0].instructions

    feedback = {"conversation_id": alice.id, "score": 0.0}
    assert post(server, feedback, KEY_B, "/autoskill/feedback").status_code == 404  # not bob's: not found
    assert records.conversations(store, "alice")[0]["feedback"] is None
    assert post(server, {**feedback, "score": 1.0}, KEY_A, "/autoskill/feedback").status_code == 200
    assert records.conversations(store, "alice")[0]["feedback"] == 1.0


def test_a_missing_or_wrong_key_is_401_and_health_stays_open(keyed):
    server, _, store, backend = keyed
    for key, message in ((None, "needs an API key"), ("alice-key-0123456788", "unknown API key"),
                         ("", "needs an API key")):
        r = post(server, {"messages": HI}, key)
        assert r.status_code == 401 and message in r.json()["error"]["message"]
        assert r.headers["www-authenticate"] == "Bearer"
    r = httpx.post(server.url + "/chat/completions", json={"messages": HI}, headers={"Authorization": KEY_A})
    assert r.status_code == 401  # the key without the Bearer scheme
    assert httpx.get(server.url + "/models").status_code == 401
    assert httpx.get(server.url + "/models", headers={"Authorization": f"Bearer {KEY_B}"}).status_code == 200
    assert post(server, {"conversation_id": "x", "score": 1}, None, "/autoskill/feedback").status_code == 401
    assert httpx.get(server.url.removesuffix("/v1") + "/health").json()["ok"] is True
    assert backend.calls == [] and records.conversations(store) == []


def test_an_open_server_refuses_a_non_loopback_address():
    open_app, keyed_app = build_app(None, Recording(), "m"), build_app(None, Recording(), "m", keys=Keys(KEYS))
    try:
        with pytest.raises(EvolverError, match="refusing to listen on 0.0.0.0 without API keys.*keys_file"):
            Server(open_app, "0.0.0.0", 0)
        Server(open_app, "localhost", 0).sock.close()  # loopback: open, as before
        Server(keyed_app, "0.0.0.0", 0).sock.close()  # keyed: any address
    finally:
        open_app.state.batcher.close()
        keyed_app.state.batcher.close()


def test_evolver_serve_without_keys_will_not_listen_on_all_interfaces(tmp_path):
    env = {**os.environ, "EVOLVER_PLUGINS": "autoskill"}
    cmd = [str(Path(sys.executable).parent / "evolver"), "--store", str(tmp_path / "ws"), "serve", "--host",
           "0.0.0.0", "--port", "0"]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "refusing to listen on 0.0.0.0 without API keys" in out.stderr and "keys_file" in out.stderr
    assert not (tmp_path / "ws").exists(), "refused before the store was created"


def test_keys_come_from_the_options_and_a_keys_file(tmp_path, capsys):
    path = tmp_path / "keys.toml"
    path.write_text(f'"{KEY_B}" = ["bob", "team"]\n')
    path.chmod(0o600)
    keys = load_keys(AutoSkillOptions(keys={KEY_A: ["alice"]}, keys_file=str(path)))
    assert len(keys) == 2 and keys.scopes_for(KEY_B) == ["bob", "team"] and keys.scopes_for(KEY_A) == ["alice"]
    assert keys.scopes_for("nope") is None and keys.scopes_for(None) is None and capsys.readouterr().err == ""
    path.chmod(0o644)
    load_keys(AutoSkillOptions(keys_file=str(path)))
    assert "readable by other users" in capsys.readouterr().err
    bad = [({"short": ["a"]}, "at least 16 characters"), ({KEY_A: []}, "non-empty list of scope names"),
           ({KEY_A: ["a b"], KEY_B: ["a_b-" + hashlib.sha256(b"a b").hexdigest()[:8]]},
            "same skill bank folder")]
    for entries, message in bad:
        with pytest.raises(ConfigError, match=message):
            Keys(entries)
    with pytest.raises(ConfigError, match="both in"):
        load_keys(AutoSkillOptions(keys={KEY_B: ["x"]}, keys_file=str(path)))
    with pytest.raises(ConfigError, match="cannot read"):
        load_keys(AutoSkillOptions(keys_file=str(tmp_path / "missing.toml")))
    assert KEY_A not in str(pytest.raises(ConfigError, Keys, {KEY_A: "alice"}).value)  # never echo a key


# -- limits and malformed shapes ------------------------------------------------------------------------


@pytest.fixture
def limited(tmp_path):
    limits = Limits.from_options(AutoSkillOptions(max_messages=4, max_chars=1000, max_body_bytes=200_000))
    server, service, store, backend = start(tmp_path, limits=limits)
    yield server, store, backend
    server.stop()
    service.close()
    store.close()


LIMITS = [
    (b'{"messages": [{"role": "user", "content": "' + b"x" * 300_000 + b'"}]}', 413, "max_body_bytes"),
    (b'{"messages": ' + b"[" * 90_000 + b"]" * 90_000 + b"}", 400, "max_json_depth"),
    ({"messages": HI, "max_tokens": 10**9}, 400, "max_request_tokens"),
    ({"messages": HI, "max_completion_tokens": 4097}, 400, "max_request_tokens"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', 400, "max_temperature"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": Infinity}', 400, "max_temperature"),
    ({"messages": HI, "temperature": 2.5}, 400, "max_temperature"),
    ({"messages": HI, "temperature": -0.1}, 400, "max_temperature"),
    ({"messages": HI * 5}, 400, "max_messages"),
    ({"messages": [{"role": "user", "content": "x" * 1001}]}, 400, "max_chars"),
]


@pytest.mark.parametrize("body,status,limit", LIMITS, ids=[c[2] + str(i) for i, c in enumerate(LIMITS)])
def test_each_limit_is_a_4xx_that_names_it(limited, body, status, limit):
    server, store, backend = limited
    r = post(server, body)
    assert r.status_code == status and f"plugins.autoskill.{limit}" in r.json()["error"]["message"]
    assert backend.calls == []


def test_a_body_over_the_limit_is_refused_while_it_streams_in(limited):
    server, *_ = limited

    def chunks():  # no Content-Length: the limit applies to what arrives
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(50):
            yield b"x" * 10_000
        yield b'"}]}'
    r = httpx.post(server.url + "/chat/completions", content=chunks(), headers={"Authorization": f"Bearer {KEY_A}"})
    assert r.status_code == 413 and "max_body_bytes" in r.json()["error"]["message"]


MALFORMED = [
    ({"messages": HI, "stop": [1, 2]}, "`stop` must be a string or a list"),
    ({"messages": HI, "stop": [1]}, "`stop` must be"),
    ({"messages": HI, "stop": ["a", "b", "c", "d", "e"]}, "at most 4 strings"),
    ({"messages": HI, "stop": {"x": 1}}, "`stop` must be"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "content[0].text must be a string"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "only text parts"),
    ({"messages": [{"role": "user", "content": ["hi"]}]}, "only text parts"),
    ({"messages": [{"role": "user", "content": 5}]}, "content must be a string or a list"),
    ({"messages": [{"role": "user"}]}, "content must be a string or a list"),
    ({"messages": HI, "stream_options": "yes"}, "`stream_options` must be an object"),
    ({"messages": HI, "stream": True, "stream_options": {"include_usage": "yes"}}, "`stream_options` must be"),
    ({"messages": HI, "stream": "yes"}, "`stream` must be true or false"),
    ({"messages": HI, "stream": 1}, "`stream` must be true or false"),
    ({"messages": ["hi"]}, "messages[0] must be an object"),
    ({"messages": [None]}, "messages[0] must be an object"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "needs a role"),
    ({"messages": [{"role": ["user"], "content": "hi"}]}, "needs a role"),
    ({"messages": "hi"}, "`messages` must be a non-empty list"),
    ({"messages": []}, "`messages` must be a non-empty list"),
    ({"messages": HI, "n": 2}, "send the request n times"),
    ({"messages": HI, "n": "1"}, "`n` must be a positive integer"),
    ({"messages": HI, "n": 0}, "`n` must be a positive integer"),
    ({"messages": HI, "n": True}, "`n` must be a positive integer"),
    ({"messages": HI, "seed": "7"}, "`seed` must be an integer"),
    ({"messages": HI, "seed": 1.5}, "`seed` must be an integer"),
    ({"messages": HI, "seed": 2**64}, "`seed` must be an integer that fits in 64 bits"),
    ({"messages": HI, "user": 5}, "`user` must be a string"),
    ({"messages": HI, "user": ["alice"]}, "`user` must be a string"),
    ({"messages": HI, "user": "a" * 129}, "`user` must be a string of at most 128"),
    ({"messages": HI, "user": "al\nice"}, "printable"),
    ({"messages": HI, "max_tokens": "10"}, "`max_tokens` must be a positive integer"),
    ({"messages": HI, "max_tokens": 0}, "`max_tokens` must be a positive integer"),
    ({"messages": HI, "max_tokens": 1.5}, "`max_tokens` must be a positive integer"),
    ({"messages": HI, "temperature": "hot"}, "`temperature` must be a finite number"),
    ({"messages": HI, "temperature": True}, "`temperature` must be a finite number"),
    ({"messages": HI, "model": 3}, "`model` must be a string"),
    ([1, 2], "must be a JSON object"),
    ("hi", "must be a JSON object"),
    (b"{nope", "not JSON"),
    (b"", "not JSON"),
    (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', "not JSON"),
    (b'{"messages": [], "max_tokens": ' + b"9" * 5000 + b"}", "not JSON"),
    (b'{"messages": "]]]]]]]]]]]"}', "`messages` must be a non-empty list"),
]


@pytest.mark.parametrize("body,message", MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
def test_every_malformed_shape_is_a_400_with_a_message(limited, capfd, body, message):
    server, store, backend = limited
    r = post(server, body)
    assert r.status_code == 400, r.text
    assert message in r.json()["error"]["message"] and r.json()["error"]["type"] == "invalid_request_error"
    assert "Traceback" not in r.text and "Traceback" not in capfd.readouterr().err
    assert backend.calls == []


def test_malformed_headers_and_feedback_are_400s(limited):
    server, *_ = limited
    assert "X-Evolver-Scope must be" in post(server, {"messages": HI}, **{"X-Evolver-Scope": "s" * 200}).text
    r = post(server, {"messages": HI}, **{"X-Evolver-Thread": "t" * 200})
    assert r.status_code == 400 and "X-Evolver-Thread" in r.text
    for body in ({"conversation_id": "x", "score": "high"}, {"conversation_id": 5, "score": 1},
                 b'{"conversation_id": "x", "score": NaN}', [1]):
        r = post(server, body, path="/autoskill/feedback")
        assert r.status_code == 400 and "conversation_id" in r.json()["error"]["message"]


def test_parse_request_keeps_what_clients_send():
    req = parse_request({"model": "m", "messages": [
        {"role": "developer", "content": [{"type": "text", "text": "be brief"}, {"type": "text", "text": "2"}]},
        {"role": "assistant", "content": None, "tool_calls": []}, {"role": "user", "content": "hi", "name": "x"}],
        "stop": "\n", "seed": 3, "max_completion_tokens": 12, "temperature": 1, "stream": True,
        "stream_options": {"include_usage": True}, "top_p": 0.9, "user": " ana "})
    assert req.messages == [{"role": "system", "content": "be brief\n2"}, {"role": "assistant", "content": ""},
                            {"role": "user", "content": "hi"}]
    assert req.gen == {"max_tokens": 12, "temperature": 1.0, "stop": ["\n"], "seed": 3}
    assert req.stream and req.include_usage and req.user == "ana"
    plain = parse_request({"messages": HI, "stop": None, "n": 1, "max_tokens": None, "temperature": None})
    assert plain.gen == {"max_tokens": 256, "temperature": 0.0, "stop": None, "seed": None} and not plain.stream


def test_json_depth_ignores_brackets_inside_strings():
    assert json_depth(b'{"a": "[[[[{{{{\\"[[[", "b": [[1], {"c": []}]}') == 4
    assert json_depth(b"[]" * 1000) == 1 and json_depth(b"1") == 0
    assert json_depth(b"[" * 70 + b"]" * 70) == 70


# -- one bad request fails alone ------------------------------------------------------------------------


def test_a_request_that_breaks_the_backend_fails_alone_not_its_batch(tmp_path):
    server, service, store, backend = start(tmp_path, batch_wait_s=0.3)  # wide window: one batch for all
    try:
        bodies = [{"messages": [{"role": "user", "content": f"question {i}"}], "stop": ["boom" if i == 3 else "."]}
                  for i in range(8)]
        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(lambda b: post(server, b).status_code, bodies))
        assert codes == [200, 200, 200, 500, 200, 200, 200, 200]
        assert backend.broken[0] > 1, f"the bad request was not batched with others: {backend.batches}"
        r = post(server, bodies[3])
        assert "no other request was affected" in r.json()["error"]["message"] and "Traceback" not in r.text
        wait_for(lambda: len(records.conversations(store)) == 7)
    finally:
        server.stop()
        service.close()
        store.close()


def test_a_systemic_backend_error_is_503_for_every_request_without_a_call_each(tmp_path):
    backend = Recording(fail=BackendError("cannot reach http://gpu:8000"))
    server, service, store, _ = start(tmp_path, backend=backend, batch_wait_s=0.3)
    try:
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda i: post(server, {"messages": HI}), range(4)))
        assert [a.status_code for a in answers] == [503] * 4
        assert "cannot reach http://gpu:8000" in answers[0].json()["error"]["message"]
        assert backend.batches[0] == 4 and len(backend.batches) == 2  # the batch, then one alone, not four
    finally:
        server.stop()
        service.close()
        store.close()
