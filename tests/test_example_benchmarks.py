"""The example benchmark plugins (examples/tool_calling_benchmark.py, examples/pooled_simulator.py): loaded as
a user would, played with the scripted backend through the evaluator, and each task's gold scores 1.0."""
import json
import os
import signal
from pathlib import Path

import pytest

from evolver import plugins
from evolver.evaluate import run_episodes
from evolver.harness import program_context
from evolver.seeding import seed_files
from scripted_players import gold_player
from evolver.programs import content_hash
from evolver.types import Program

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def load(monkeypatch):
    """``load(file, name, **options)``: the benchmark an example plugin registers."""
    monkeypatch.setenv("EVOLVER_PLUGINS", "")  # no installed entry-point plugins
    plugins.reset()
    made = []

    def make(file, name, **options):
        plugins.load_local(ROOT / "examples" / file)
        made.append(plugins.make("benchmark", name, **options))
        return made[-1]
    yield make
    for bench in made:
        bench.close()
    plugins.reset()


def program(tmp_path, bench):
    root = seed_files(skills=[], system_prompt=bench.harness_hints.get("system_prompt"), into=tmp_path / "p")
    return Program("p", "", str(root), content_hash(root), {})


def play_gold(tmp_path, bench, tasks, **kw):
    backend = gold_player(tasks)
    return run_episodes(program_context(program(tmp_path, bench)), bench, backend, tasks, **kw), backend


# -- the support desk: tool calls as JSON, partial credit, long docs cut visibly ---------------
def test_support_desk_gold_scores_one_through_the_tool_calling_preset(tmp_path, load):
    bench = load("tool_calling_benchmark.py", "shop-support")
    tasks = bench.tasks("dev", 3)
    assert {t.category for t in tasks} == {"damaged", "lost", "cancel", "status"} and len(tasks) == 12
    assert [t.id for t in tasks] == [t.id for t in bench.tasks("dev", 3)]  # deterministic
    assert not {t.id for t in tasks} & {t.id for t in bench.tasks("test", 3)}
    assert any(json.loads(t.gold[0])["name"] == "lookup_customer" for t in tasks)  # some tickets lack the id
    eps, backend = play_gold(tmp_path, bench, tasks)
    assert [e.error for e in eps] == [None] * 12
    assert all(e.score == 1.0 and e.won for e in eps)
    assert [[s.action for s in e.steps] for e in eps] == [t.gold for t in tasks]  # calls reached the env as JSON
    assert eps[0].rewards == {"score": 1.0, "lookup": 1.0, "resolution": 1.0, "reply": 1.0, "policy": 1.0}
    first = backend.calls[0]
    assert first.tools == tasks[0].tools and first.messages[0].content.startswith("You are a support agent")
    docs = [tool["function"]["description"] for tool in first.tools]
    assert len(docs) == 6 and min(map(len, docs)) > 3000  # several thousand characters each
    system = first.messages[0].content
    assert "- lookup_customer(email): Find a customer by email" in system  # the first docs reach the prompt ...
    cut = __import__("re").search(r"\[\.\.\. (\d+) more tokens cut\]", system)
    assert cut and int(cut.group(1)) > 500 and docs[-1] not in system  # ... the rest is cut, visibly, in tokens
    assert "more tokens cut" in eps[0].steps[0].prompt  # and the trace keeps the marker


def test_support_desk_partial_credit_bad_calls_and_policy(load):
    bench = load("tool_calling_benchmark.py", "shop-support")
    lost = next(t for t in bench.tasks("dev", 2) if t.category == "lost")
    lookup = next(a for a in lost.gold if '"lookup_order"' in a)
    oid = json.loads(lookup)["arguments"]["order_id"]
    env = bench.env(lost)
    env.reset()
    for bad in ["{not json", '{"name": "teleport", "arguments": {}}', '{"name": "lookup_order", "arguments": {}}',
                json.dumps({"name": "cancel_order", "arguments": {"order_id": oid}})]:  # shipped: E409, no change
        obs = env.step(bad)
        assert obs.text.startswith("Error") or '"E409"' in obs.text
        assert obs.score == 0.0 and not obs.done
    assert env.step(lookup).score == 0.2
    closed = env.step(f"Order {oid} is on its way.")  # replied without resolving: no more credit
    assert closed.done and closed.score == 0.2 and not closed.info["won"]
    env = bench.env(lost)
    env.reset()
    env.step(lookup)
    obs = env.step(json.dumps({"name": "refund_order", "arguments": {"order_id": oid, "amount": 1, "reason": "goodwill"}}))
    assert '"E409"' in obs.text  # a refund of a parcel on its way is refused
    damaged = next(t for t in bench.tasks("dev", 2) if t.category == "damaged")
    env = bench.env(damaged)
    env.reset()
    refund = next(a for a in damaged.gold if '"refund_order"' in a)
    env.step(next(a for a in damaged.gold if '"lookup_order"' in a))
    assert env.step(refund).score == pytest.approx(0.7)
    call = json.loads(refund)
    call["arguments"]["order_id"] = next(o for o in env.orders if o != call["arguments"]["order_id"])
    call["arguments"]["amount"] = 1.0
    assert '"refunded"' in env.step(json.dumps(call)).text  # done by the system, forbidden by the policy ...
    last = env.step(damaged.gold[-1])  # ... so the right reply no longer wins
    assert last.score == 0.2 and last.info["rewards"]["policy"] == 0.0


# -- the pooled simulator: worker processes, sharing with replay, nothing left after close -----
def test_pooled_simulator_plays_gold_to_one_when_more_envs_are_live_than_workers(tmp_path, load):
    bench = load("pooled_simulator.py", "vault", pool_size=2)
    assert bench.max_live == 2  # a benchmark caps live Envs at its pool
    tasks = bench.tasks("dev", 6)
    assert not {t.id for t in tasks} & {t.id for t in bench.tasks("train", 6)}
    own, _ = play_gold(tmp_path / "own", bench, tasks)
    assert bench.pool.stats["replays"] == 0 and bench.pool.stats["shared"] == 0
    bench.max_live = None  # as with an explicit --max-live: 6 live Envs on 2 processes, shared
    shared, _ = play_gold(tmp_path / "shared", bench, tasks, max_live=6)
    pool = bench.pool
    assert pool.stats["shared"] > 0 and pool.stats["replays"] > 0 and pool.stats["started"] == 2
    for eps in (own, shared):
        assert [e.error for e in eps] == [None] * 6 and all(e.score == 1.0 and e.won for e in eps)
        assert [[s.action for s in e.steps] for e in eps] == [t.gold for t in tasks]
    assert [[s.observation for s in e.steps] for e in shared] == [[s.observation for s in e.steps] for e in own]
    pids = [w.proc.pid for w in pool.workers]
    assert len(pids) == 2 and pool.leased == 0
    bench.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_pooled_simulator_survives_a_killed_worker_and_says_so_for_a_bad_action(load):
    bench = load("pooled_simulator.py", "vault", pool_size=1)
    task = max(bench.tasks("dev", 10), key=lambda t: len(t.gold))
    env = bench.env(task)
    obs = env.reset()
    assert obs.actions and "look" in obs.info
    bad = env.step("dance")
    assert "can't" in bad.text and bad.score == 0.0 and not bad.done
    for action in task.gold[:3]:
        env.step(action)
    victim = bench.pool.workers[0].proc
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    for action in task.gold[3:]:
        obs = env.step(action)
    assert obs.done and obs.score == 1.0 and obs.info["won"]
    assert bench.pool.stats["restarts"] == 1 and bench.pool.workers[0].proc.pid != victim.pid
    env.close()
