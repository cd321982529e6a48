"""`evolver serve` throughput and added latency, side by side with the bare backend.

Two servers run at once in front of the same backend instance: one bare (the same HTTP code, no
rewrite / retrieval / injection / logging / learning) and one with AutoSkill over a bank of
``--bank`` skills (real all-MiniLM-L6-v2, DuckDB store, git bank, background extraction). Load rounds
alternate between the two so drift on this shared machine hits both alike. Prints one row per
(backend, mode) and the added latency.

    .venv/bin/python bench/autoskill_serve.py [--backends scripted transformers] [--bank 500]
        [--requests 200] [--concurrency 8] [--rounds 4] [--lm-requests 16] [--lm-max-tokens 16] [--threads N]
"""
from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from autoskill_retrieval import ACTIONS, AUDIENCES, RULES, TOPICS, make_cards
from evolver import open_workspace
from evolver.backends.scripted import ScriptedBackend
from evolver_autoskill.bank import SkillBank
from evolver_autoskill.options import AutoSkillOptions
from evolver_autoskill.serve import Server, build_app
from evolver_autoskill.service import AutoSkillService


def seed_bank(root: Path, scope: str, n: int) -> None:
    """Write n cards in one commit (the bank API commits per card, which would take minutes here)."""
    from evolver_autoskill.card import write_card

    bank = SkillBank(root, scope)
    for c in make_cards(n):
        write_card(bank.skills_dir, c)
    bank._commit(f"bench: {n} synthetic skills", [])


def load(url: str, requests: list[dict], concurrency: int, prompt_tokens: list[int]) -> tuple[float, list[float]]:
    lat: list[float] = []
    with httpx.Client(timeout=300) as client:
        def one(body):
            t = time.perf_counter()
            r = client.post(url + "/chat/completions", json=body)
            r.raise_for_status()
            lat.append(time.perf_counter() - t)
            prompt_tokens.append(r.json()["usage"]["prompt_tokens"])
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, requests))
        wall = time.perf_counter() - t0
    return len(requests) / wall, lat


def bodies(n: int, max_tokens: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        turns = [f"Please {rng.choice(ACTIONS)} my {rng.choice(TOPICS)} {rng.choice(AUDIENCES)}."]
        if rng.random() < 0.5:
            turns += ["Sure, here it is.", f"Also {rng.choice(RULES)}."]
        msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
        out.append({"model": "m", "messages": msgs, "max_tokens": max_tokens, "user": "bench"})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", nargs="+", default=["scripted", "transformers"])
    ap.add_argument("--bank", type=int, default=500)
    ap.add_argument("--requests", type=int, default=200, help="per round and mode, scripted backend")
    ap.add_argument("--lm-requests", type=int, default=16, help="per round and mode, transformers backend")
    ap.add_argument("--lm-max-tokens", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads for the whole process")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="autoskill-bench-"))
    seed_bank(work / "autoskill", "bench", args.bank)
    store, _ = open_workspace(work)
    service = AutoSkillService(work / "autoskill", store, AutoSkillOptions())
    service.retriever("bench")  # index once before timing, as a running server would have
    rows = []
    for name in args.backends:
        if name == "scripted":
            backend, n, max_tokens = ScriptedBackend(rule=lambda req: "fine, done as asked"), args.requests, 16
        else:
            from evolver_transformers.backend import TransformersBackend

            backend, n, max_tokens = TransformersBackend(), args.lm_requests, args.lm_max_tokens
        servers = {mode: Server(build_app(service, backend, name, autoskill=(mode == "autoskill")),
                                "127.0.0.1", 0).start() for mode in ("bare", "autoskill")}
        stats = {mode: {"rps": [], "lat": [], "tok": []} for mode in servers}
        for mode, srv in servers.items():
            load(srv.url, bodies(4, max_tokens, 99), 2, [])  # warm-up: first batch, first retrieval
        for r in range(args.rounds):
            order = ("bare", "autoskill") if r % 2 == 0 else ("autoskill", "bare")
            for mode in order:
                rps, lat = load(servers[mode].url, bodies(n, max_tokens, r), args.concurrency, stats[mode]["tok"])
                stats[mode]["rps"].append(rps)
                stats[mode]["lat"] += lat
        service.drain()
        for srv in servers.values():
            srv.stop()
        base = statistics.median(stats["bare"]["lat"])
        for mode, s in stats.items():
            lat = sorted(s["lat"])
            p50 = statistics.median(lat)
            rows.append([name, mode, len(lat), args.concurrency, f"{statistics.fmean(s['rps']):.1f}",
                         f"{1000 * p50:.1f}", f"{1000 * lat[int(0.95 * (len(lat) - 1))]:.1f}",
                         "-" if mode == "bare" else f"{1000 * (p50 - base):+.1f}",
                         f"{statistics.fmean(s['tok']):.0f}"])
        backend.close()
    service.close()
    store.close()
    cols = ["backend", "mode", "requests", "concurrency", "req/s", "p50 ms", "p95 ms", "added p50 ms",
            "prompt tokens"]
    print(f"bank: {args.bank} skills, embedder all-MiniLM-L6-v2, rounds {args.rounds} (alternating), "
          f"torch threads {args.threads or 'default'}")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(map(str, r)) + " |")


if __name__ == "__main__":
    main()
