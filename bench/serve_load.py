"""`evolver serve` under a hostile load: N concurrent clients on 127.0.0.1 sending a mix of good and bad
requests, and then the store read back once the server has stopped.

The server runs in its own process (API keys for three callers, the default limits, AutoSkill on with the
hashing embedder) in front of the scripted backend, or the embedded model with ``--backend transformers``.
Each request has the status it must get: good ones (plain, streamed, a named scope of the key's) 200; no key
or a wrong one 401; another caller's scope 403; malformed shapes 400; limits 400 or 413; and, with the
scripted backend, a request that breaks the backend's whole batch call 500 (the others of its batch must
still get 200). Prints latency per kind, the statuses that differ from the expected ones, and checks that
every accepted conversation is stored exactly once, in the scope of its key, and nothing else is.

    .venv/bin/python bench/serve_load.py [--requests 300] [--clients 16] [--bad 0.4] [--backend scripted]
        [--max-tokens 16] [--timeout 30] [--seed 0]

Exit status 1 when a request got another status than expected or the store check fails.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import secrets
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

TOPICS = ["an email to my landlord about the heating", "a python function that sorts names",
          "a vegetarian dinner for four", "a three-day trip to Rome", "a note to my team about Friday"]
PREFERENCES = ["Always sign my notes with 'Best, Ana'.", "Never use exclamation marks.",
               "I prefer short answers in bullet points.", "From now on, write dates as YYYY-MM-DD."]


@dataclass
class Probe:
    kind: str
    expect: int
    body: dict | bytes
    key: str | None
    scope: str | None = None  # where an accepted conversation must be stored
    headers: dict = field(default_factory=dict)
    stream: bool = False
    status: int | str = 0
    latency: float = 0.0
    conversation: str | None = None


# -- the server, in its own process ----------------------------------------------------------------------


def scripted_answer(req) -> str:
    """The scripted model; a stop string "boom" stands for a request that crashes the backend's call."""
    if any("boom" in s for s in req.stop or []):
        raise RuntimeError("the backend crashed on this request's stop strings")
    last = req.messages[-1].content.split()
    return "Done: " + " ".join(last[:8])


def serve(work: str, keys: dict, backend_name: str, embedder: str, port_q, stop) -> None:
    from evolver import make_plugin, open_workspace
    from evolver_autoskill.auth import Keys
    from evolver_autoskill.options import AutoSkillOptions
    from evolver_autoskill.request import Limits
    from evolver_autoskill.serve import LockedBackend, Server, build_app
    from evolver_autoskill.service import AutoSkillService

    log = open(Path(work) / "serve.log", "w")  # the server's log (a backend crash is logged with its traceback)
    os.dup2(log.fileno(), 2)
    sys.stderr = log
    store, _ = open_workspace(work)
    options = AutoSkillOptions(embedder=embedder)
    service = AutoSkillService(Path(work) / "autoskill", store, options)
    inner = (make_plugin("backend", "scripted", rule=scripted_answer) if backend_name == "scripted"
             else make_plugin("backend", backend_name))
    backend = LockedBackend(inner)
    app = build_app(service, backend, backend_name, options.max_batch, options.batch_wait_ms / 1000,
                    keys=Keys(keys), limits=Limits.from_options(options))
    server = Server(app, "127.0.0.1", 0).start()
    port_q.put(server.port)
    stop.wait()
    server.stop()  # finishes open requests; their after-response tasks (the store rows) run before it returns
    app.state.batcher.close()
    service.close()  # queued extractions finish
    backend.close()
    store.close()


# -- the load --------------------------------------------------------------------------------------------


def make_probes(n: int, bad: float, keys: dict, backend: str, max_tokens: int, rng: random.Random) -> list[Probe]:
    by_key = list(keys.items())
    wrong = "wrong-" + secrets.token_urlsafe(24)
    hi = [{"role": "user", "content": "hi"}]
    malformed = [{"messages": hi, "stop": [1, 2]}, {"messages": [{"role": "user", "content": [{"type": "text",
                                                                                                "text": 5}]}]},
                 {"messages": hi, "stream_options": "yes"}, {"messages": ["hi"]}, {"messages": hi, "n": "2"},
                 {"messages": hi, "seed": "7"}, {"messages": hi, "user": 42}, {"messages": hi, "stream": "yes"},
                 b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", b"{not json"]
    limits = [(b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', 400),
              ({"messages": hi, "max_tokens": 10**9}, 400), ({"messages": hi, "temperature": 7}, 400),
              ({"messages": hi * 300}, 400),
              (b'{"messages": [{"role": "user", "content": "' + b"x" * 1_500_000 + b'"}]}', 413)]
    bad_kinds = ["no_key", "wrong_key", "other_scope", "malformed", "limit"] + (["breaks_backend"] * 2
                                                                                 if backend == "scripted" else [])
    probes = []
    for i in range(n):
        key, scopes = by_key[rng.randrange(len(by_key))]
        turns = [{"role": "user", "content": f"Please write {rng.choice(TOPICS)} (request {i})."}]
        if rng.random() < 0.3:
            turns += [{"role": "assistant", "content": "Here it is."},
                      {"role": "user", "content": rng.choice(PREFERENCES)}]
        good = {"model": "m", "messages": turns, "max_tokens": max_tokens}
        if rng.random() >= bad:
            scope = rng.choice(scopes) if rng.random() < 0.5 else None
            stream = rng.random() < 0.25
            body = {**good, "stream": stream, **({"user": scope} if scope else {})}
            probes.append(Probe("good_stream" if stream else "good", 200, body, key, scope or scopes[0],
                                stream=stream))
            continue
        kind = rng.choice(bad_kinds)
        if kind == "no_key":
            probes.append(Probe(kind, 401, good, None))
        elif kind == "wrong_key":
            probes.append(Probe(kind, 401, good, wrong))
        elif kind == "other_scope":
            others = [s for _, ss in by_key for s in ss if s not in scopes]
            probes.append(Probe(kind, 403, good, key, headers={"X-Evolver-Scope": rng.choice(others)}))
        elif kind == "malformed":
            probes.append(Probe(kind, 400, rng.choice(malformed), key))
        elif kind == "limit":
            body, status = rng.choice(limits)
            probes.append(Probe(kind, status, body, key))
        else:
            probes.append(Probe(kind, 500, {**good, "stop": ["boom"]}, key))
    return probes


def send(client: httpx.Client, url: str, p: Probe) -> None:
    headers = {"content-type": "application/json", **p.headers}
    if p.key:
        headers["authorization"] = f"Bearer {p.key}"
    content = p.body if isinstance(p.body, bytes) else json.dumps(p.body).encode()
    t = time.perf_counter()
    try:
        with client.stream("POST", url + "/chat/completions", content=content, headers=headers) as r:
            body = r.read()
            p.status = r.status_code
            p.conversation = r.headers.get("x-evolver-conversation")
            if r.status_code >= 400:
                json.loads(body)["error"]["message"]  # every refusal is a JSON error with a message
            elif p.stream and not body.rstrip().endswith(b"data: [DONE]"):
                p.status = "truncated stream"
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        p.status = type(exc).__name__
    p.latency = time.perf_counter() - t


def drive(url: str, probes: list[Probe], clients: int, timeout: float) -> float:
    local = threading.local()
    made: list[httpx.Client] = []

    def one(p: Probe) -> None:
        if not hasattr(local, "client"):
            local.client = httpx.Client(timeout=timeout)
            made.append(local.client)
        send(local.client, url, p)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, probes))
    for c in made:
        c.close()
    return time.perf_counter() - t0


# -- the report ------------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> str:
    if not values:
        return "-"
    v = sorted(values)
    return f"{1000 * v[min(len(v) - 1, round(q * (len(v) - 1)))]:.1f}"


def check_store(work: Path, probes: list[Probe]) -> tuple[str, bool]:
    from evolver import open_workspace
    from evolver_autoskill import records

    store, _ = open_workspace(work, read_only=True)
    with store:
        rows = records.conversations(store)
    accepted = {p.conversation: p for p in probes if p.status == 200}
    counts = Counter(r["conversation_id"] for r in rows)
    scopes = {r["conversation_id"]: r["scope"] for r in rows}
    missing = [c for c in accepted if counts[c] == 0]
    twice = [c for c, n in counts.items() if n > 1]
    extra = [c for c in counts if c not in accepted]
    wrong_scope = [c for c, p in accepted.items() if c in scopes and scopes[c] != p.scope]
    ok = not (missing or twice or extra or wrong_scope) and None not in accepted
    return (f"accepted {len(accepted)} (the warm-up included), rows {len(rows)}: missing {len(missing)}, "
            f"stored twice {len(twice)}, rows of no accepted request {len(extra)}, "
            f"in another scope {len(wrong_scope)} -> "
            f"{'every accepted conversation stored exactly once' if ok else 'FAILED'}"), ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--bad", type=float, default=0.4, help="share of bad requests")
    ap.add_argument("--backend", default="scripted", help="scripted, or transformers (the embedded model)")
    ap.add_argument("--embedder", default="hashing")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=30.0, help="per request, seconds")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not 1 <= args.requests <= 100_000 or not 1 <= args.clients <= 512:
        ap.error("--requests must be in [1, 100000] and --clients in [1, 512]")
    work = Path(tempfile.mkdtemp(prefix="serve-load-"))
    keys = {secrets.token_urlsafe(24): ["alice"], secrets.token_urlsafe(24): ["bob"],
            secrets.token_urlsafe(24): ["carol", "dave"]}
    probes = make_probes(args.requests, args.bad, keys, args.backend, args.max_tokens, random.Random(args.seed))

    ctx = multiprocessing.get_context("spawn")
    port_q, stop = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=serve, args=(str(work), keys, args.backend, args.embedder, port_q, stop))
    child.start()
    port = port_q.get(timeout=600)
    url = f"http://127.0.0.1:{port}/v1"
    warm = Probe("warm-up", 200, {"messages": [{"role": "user", "content": "hi"}]}, next(iter(keys)), "alice")
    drive(url, [warm], 1, args.timeout)  # the first batch and retrieval, off the clock (its row is checked too)
    wall = drive(url, probes, args.clients, args.timeout)
    stop.set()
    child.join(timeout=300)
    if child.is_alive():
        child.kill()
        raise SystemExit("the server did not stop within 300 s")

    by_kind: dict[str, list[Probe]] = defaultdict(list)
    for p in probes:
        by_kind[p.kind].append(p)
    print(f"evolver serve load: {args.requests} requests from {args.clients} concurrent clients in {wall:.1f} s "
          f"({args.requests / wall:.0f} req/s), backend {args.backend}, {args.bad:.0%} bad, 127.0.0.1")
    print("| kind | sent | expected | got | unexpected | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|")
    unexpected = 0
    for kind, ps in sorted(by_kind.items()):
        got = Counter(p.status for p in ps)
        wrong = sum(1 for p in ps if p.status != p.expect)
        unexpected += wrong
        expect = "/".join(str(s) for s in sorted({p.expect for p in ps}))
        print(f"| {kind} | {len(ps)} | {expect} | {', '.join(f'{s}: {n}' for s, n in sorted(got.items(), key=str))} "
              f"| {wrong} | {pct([p.latency for p in ps], 0.5)} | {pct([p.latency for p in ps], 0.99)} |")
    ok_lat = [p.latency for p in probes if p.status == 200]
    print(f"| all accepted | {len(ok_lat)} | 200 | | | {pct(ok_lat, 0.5)} | {pct(ok_lat, 0.99)} |")
    errors = Counter((p.kind, p.status) for p in probes if p.status != 200)
    print("errors by kind: " + (", ".join(f"{k} {s}: {n}" for (k, s), n in sorted(errors.items(), key=str)) or "none"))
    line, stored_ok = check_store(work, probes + [warm])
    print("store: " + line)
    log = (work / "serve.log").read_text()
    print(f"server log: {work / 'serve.log'}: {log.count('the backend raised on request')} backend crashes logged, "
          f"{log.count('Exception in ASGI application')} unhandled exceptions")
    unhandled = log.count("Exception in ASGI application")
    if unexpected or not stored_ok or unhandled:
        raise SystemExit(f"FAILED: {unexpected} unexpected statuses, {unhandled} unhandled exceptions, "
                         f"store check {'ok' if stored_ok else 'failed'}")


if __name__ == "__main__":
    main()
