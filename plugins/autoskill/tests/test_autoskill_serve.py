"""`evolver serve` on localhost, driven by the official openai client and by the core's openai backend."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from autoskill_helpers import card
from evolver.backends.openai_backend import OpenAIBackend
from evolver.backends.scripted import ScriptedBackend
from evolver.store import Store
from evolver.types import GenRequest, Message
from evolver_autoskill import records
from evolver_autoskill.bank import SkillBank
from evolver_autoskill.options import AutoSkillOptions
from evolver_autoskill.serve import Server, build_app
from evolver_autoskill.service import AutoSkillService

EMAIL = card("formal-email", "Use when writing an email to a landlord or an office",
             "- Open with 'Dear Sir or Madam'.\n- Sign with the full name.", triggers=["email", "landlord"])


def answer(req):
    """The scripted model follows a skill only when one is in its context, like a real one should."""
    system = "\n".join(m.content for m in req.messages if m.role == "system")
    return "Dear Sir or Madam, the heating is broken." if "### formal-email" in system else "hey, heating broken"


@pytest.fixture
def served(tmp_path):
    store = Store(tmp_path / "evolver.duckdb")
    for scope in ("alice", "default"):
        SkillBank(tmp_path / "autoskill", scope).add(EMAIL, ["seed"])
    service = AutoSkillService(tmp_path / "autoskill", store, AutoSkillOptions(embedder="hashing"))
    backend = ScriptedBackend(rule=answer)
    server = Server(build_app(service, backend, "scripted-model"), "127.0.0.1", 0).start()
    yield server, service, store, backend
    server.stop()
    service.close()
    store.close()


def wait_for(condition, timeout=20.0):
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out waiting for the background work"
        time.sleep(0.05)


ASK = "Write an email to my landlord about the broken heating"


def test_openai_client_gets_an_answer_with_the_users_skill_injected(served):
    server, service, store, backend = served
    client = OpenAI(base_url=server.url, api_key="unused")
    resp = client.chat.completions.create(model="scripted-model", user="alice",
                                          messages=[{"role": "user", "content": ASK}])
    assert resp.choices[0].message.content.startswith("Dear Sir or Madam")
    assert resp.model_extra["evolver"]["skills"] == ["formal-email"] and resp.usage.total_tokens > 0
    assert "### formal-email (v0.1.0)" in backend.calls[-1].messages[0].content
    other = client.chat.completions.create(model="scripted-model", user="bob",
                                           extra_headers={"X-Evolver-Thread": "t-42"},
                                           messages=[{"role": "user", "content": ASK}])
    assert other.choices[0].message.content == "hey, heating broken"  # bob's bank is his own, and empty

    wait_for(lambda: len(records.conversations(store)) == 2)
    rows = {r["scope"]: r for r in records.conversations(store)}
    assert rows["alice"]["injected"] == ["formal-email"] and rows["bob"]["injected"] == []
    assert rows["bob"]["thread_id"] == "t-42" and len(rows["alice"]["thread_id"]) == 16
    assert rows["alice"]["messages"][-1] == {"role": "assistant", "content": resp.choices[0].message.content}
    assert resp.id == f"chatcmpl-{rows['alice']['conversation_id']}"
    decisions = records.retrievals(store, "alice")[0]["decisions"]
    assert decisions[0]["name"] == "formal-email" and decisions[0]["decision"] == "injected"


def test_streaming_gives_the_same_text_in_chunks(served):
    server, *_ = served
    client = OpenAI(base_url=server.url, api_key="unused")
    plain = client.chat.completions.create(model="m", user="alice", messages=[{"role": "user", "content": ASK}])
    chunks = list(client.chat.completions.create(model="m", user="alice", stream=True,
                                                 stream_options={"include_usage": True},
                                                 messages=[{"role": "user", "content": ASK}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content and len(chunks) > 3
    assert chunks[-2].choices[0].finish_reason == "stop" and chunks[-1].usage.total_tokens > 0


def test_core_openai_backend_against_evolver_serve(served):
    server, *_ = served
    backend = OpenAIBackend(model="scripted-model", base_url=server.url, max_retries=0)
    try:
        out = backend.generate([GenRequest([Message("user", ASK)], max_tokens=32),
                                GenRequest([Message("user", "What is 2+2?")], max_tokens=8)])
    finally:
        backend.close()
    assert out[0].text.startswith("Dear Sir or Madam") and out[0].error is None  # the default scope's skill
    assert out[1].text == "hey, heating broken" and out[1].completion_tokens > 0


def test_conversations_teach_the_bank_in_the_background(served):
    server, service, store, _ = served
    client = OpenAI(base_url=server.url, api_key="unused")
    messages = [{"role": "user", "content": "Draft a note to my team about the Friday release."},
                {"role": "assistant", "content": "Hi all!!! Release on Friday!!!"},
                {"role": "user", "content": "Always sign my notes with 'Best, Ana'. Never use exclamation marks."}]
    client.chat.completions.create(model="m", user="carol", messages=messages)
    client.chat.completions.create(model="m", user="carol",
                                   messages=[{"role": "user", "content": "Translate 'thank you' into German."}])
    wait_for(lambda: len(records.conversations(store, "carol")) == 2)
    service.drain()
    cards = service.bank("carol").cards()
    assert len(cards) == 1, "one durable preference, one one-off request: one skill"
    assert "Best, Ana" in cards[0].instructions and "!!!" not in cards[0].instructions  # user turns only
    events = records.events(store, "carol")
    assert [e["action"] for e in events] == ["add"] and events[0]["evidence"][0].startswith("conversation:")


def test_bad_requests_get_a_clear_error(served):
    server, *_ = served
    r = httpx.post(server.url + "/chat/completions", json={"model": "m"})
    assert r.status_code == 400 and "`messages` must be a non-empty list" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/chat/completions", json={"model": "m", "n": 3,
                                                          "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "send the request n times" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/chat/completions", content=b"{nope")
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]


def start_cli(tmp_path, *extra):
    """`evolver serve` as a user runs it (the toy benchmark and scripted backend loaded with --plugin)."""
    toy = Path(__file__).resolve().parents[3] / "tests" / "toybench.py"
    env = {**os.environ, "EVOLVER_PLUGINS": "autoskill", "PYTHONUNBUFFERED": "1"}
    cmd = [str(Path(sys.executable).parent / "evolver"), "--plugin", str(toy), "--store", str(tmp_path / "ws"),
           "serve", "--backend", "toyrule", "--port", "0", "--set", 'plugins.autoskill.embedder="hashing"', *extra]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    proc.startup = []  # the start-up's stage lines (stderr is no terminal: plain lines), before the address
    while "listening on http://127.0.0.1:" not in (line := proc.stdout.readline()):
        proc.startup.append(line)
        if not line:
            proc.kill()
            raise AssertionError("".join(proc.startup) + proc.stdout.read())
    return proc, line.split("listening on ")[1].split()[0]


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_evolver_serve_starts_with_one_command_prints_its_address_and_stops_cleanly(tmp_path, stop_signal):
    proc, url = start_cli(tmp_path)
    assert proc.startup[0].startswith("evolver serve start-up: 0/3 stages  [0:00]  loading the answering model")
    assert proc.startup[-1].startswith("evolver serve start-up: 3/3 stages") and proc.startup[-1].endswith("ready\n")
    try:
        client = OpenAI(base_url=url, api_key="unused")
        resp = client.chat.completions.create(model="toyrule", messages=[{"role": "user",
                                                                          "content": "Answer with the word: apple"}])
        assert resp.choices[0].message.content == "apple"
    finally:
        proc.send_signal(stop_signal)
        rest = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0 and "evolver serve: stopped" in rest, rest
    with Store(tmp_path / "ws" / "evolver.duckdb") as store:  # released: the file opens again
        assert [r["response"] for r in records.conversations(store)] == ["apple"]


def test_feedback_scores_a_served_answer(served):
    server, service, store, _ = served
    client = OpenAI(base_url=server.url, api_key="unused")
    resp = client.chat.completions.create(model="m", user="alice", messages=[{"role": "user", "content": ASK}])
    wait_for(lambda: len(records.conversations(store, "alice")) == 1)
    ok = httpx.post(server.url + "/autoskill/feedback", json={"conversation_id": resp.id, "score": 0.75})
    assert ok.status_code == 200 and records.conversations(store, "alice")[0]["feedback"] == 0.75
    feedback = server.url + "/autoskill/feedback"
    assert httpx.post(feedback, json={"conversation_id": "nope", "score": 1}).status_code == 404
    assert httpx.post(feedback, json={"score": 1}).status_code == 400


def test_evolver_serve_gates_learned_skills_on_a_validation_split(tmp_path):
    proc, url = start_cli(tmp_path, "--set", 'plugins.autoskill.gate_benchmark="upper"')
    try:
        client = OpenAI(base_url=url, api_key="unused")
        client.chat.completions.create(model="toyrule", user="ana", messages=[
            {"role": "user", "content": "Answer with the word: apple"}, {"role": "assistant", "content": "apple"},
            {"role": "user", "content": "Always answer in UPPERCASE letters."}])
    finally:
        proc.send_signal(signal.SIGTERM)  # stopping waits for the queued extraction and its gate
        rest = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, rest
    with Store(tmp_path / "ws" / "evolver.duckdb") as store:
        events = records.events(store, "ana")
    assert [e["action"] for e in events] == ["add"]
    assert "gate 0.000 -> 1.000 (kept)" in events[0]["reason"]  # the toy dev split, played with the skill


def test_a_failing_skill_layer_still_answers(served, monkeypatch, capsys):
    server, service, *_ = served

    def broken(*args):
        raise OSError("disk full")
    monkeypatch.setattr(service, "prepare", broken)
    client = OpenAI(base_url=server.url, api_key="unused")
    resp = client.chat.completions.create(model="m", user="alice", messages=[{"role": "user", "content": ASK}])
    assert resp.choices[0].message.content == "hey, heating broken" and resp.model_extra["evolver"]["skills"] == []
    assert "answering without skills" in capsys.readouterr().err


def test_evolver_serve_with_a_keys_file_admits_only_its_keys(tmp_path):
    keys = tmp_path / "keys.toml"
    keys.write_text('"ana-key-0123456789abcdef" = ["ana"]\n')
    keys.chmod(0o600)
    proc, url = start_cli(tmp_path, "--set", f"plugins.autoskill.keys_file={json.dumps(str(keys))}",
                          "--set", "plugins.autoskill.max_request_tokens=64")
    try:
        ask = [{"role": "user", "content": "Answer with the word: apple"}]
        assert httpx.post(url + "/chat/completions", json={"messages": ask}).status_code == 401
        client = OpenAI(base_url=url, api_key="ana-key-0123456789abcdef")
        resp = client.chat.completions.create(model="toyrule", messages=ask)
        assert resp.choices[0].message.content == "apple" and resp.model_extra["evolver"]["scope"] == "ana"
        r = httpx.post(url + "/chat/completions", json={"messages": ask, "max_tokens": 65},
                       headers={"Authorization": "Bearer ana-key-0123456789abcdef"})
        assert r.status_code == 400 and "plugins.autoskill.max_request_tokens" in r.json()["error"]["message"]
    finally:
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, rest
