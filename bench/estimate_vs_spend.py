"""What each finished run in a store estimated before its search (evolver/estimate.py) against what it
spent, and where the difference lies: the seed's own episodes (its dev and test, the first rollouts) and
the search (every other program's episodes, later rollouts included).

    python bench/estimate_vs_spend.py [STORE_FOLDER ...]   # default: ./store

Prints one row per finished run: estimated and spent tokens and calls (every role's spend, from the
run's summary), the error of each, the seed part and the search part of both, in tokens, and the
estimate said again once the first candidates had played their smoke episodes (the revised one).
"""
from __future__ import annotations

import sys
from pathlib import Path

from evolver.seeding import SEED_ID
from evolver.store import Store


def rows(folder: Path) -> list[tuple]:
    out = []
    with Store(folder / "evolver.duckdb", read_only=True) as store:
        for (rid,) in store.query("SELECT run_id FROM runs WHERE status = 'finished' ORDER BY created_at")[1]:
            summary = store.get_run(rid)["summary"] or {}
            est = summary.get("estimate")
            if not est:
                continue
            spend = summary.get("spend") or {}
            tokens = sum(s["tokens"] for s in spend.values())
            calls = sum(s["calls"] for s in spend.values())
            seed_spent = store.query(
                "SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) FROM episodes "
                "WHERE run_id = ? AND program_id = ?", [rid, SEED_ID])[1][0][0]
            out.append((rid, est["tokens"], tokens, est["calls"], calls, est.get("seed_tokens", 0), seed_spent,
                        est["tokens"] - est.get("seed_tokens", 0), tokens - seed_spent, est.get("ratio"),
                        est["iterations"], summary.get("iterations"), (est.get("revised") or {}).get("tokens")))
    return out


def main(argv: list[str]) -> None:
    folders = [Path(a) for a in argv] or [Path("store")]
    print("| run | tokens est / spent (error) | calls est / spent (error) | seed part est / spent | "
          "search part est / spent | ratio | iterations est / run | revised tokens (error) |")
    print("|---|---|---|---|---|---|---|---|")
    for folder in folders:
        for (rid, et, st, ec, sc, es, ss, esr, ssr, ratio, ei, si, rt) in rows(folder):
            err = lambda e, s: f"{(e - s) / s:+.0%}" if s else "n/a"  # noqa: E731
            print(f"| {rid} | {et:,} / {st:,} ({err(et, st)}) | {ec:,} / {sc:,} ({err(ec, sc)}) | "
                  f"{es:,} / {ss:,} ({err(es, ss)}) | {esr:,} / {ssr:,} ({err(esr, ssr)}) | "
                  f"{'none' if ratio is None else f'{ratio:.3f}'} | {ei} / {si} | "
                  f"{'none' if rt is None else f'{rt:,} ({err(rt, st)})'} |")


if __name__ == "__main__":
    main(sys.argv[1:])
