"""Meta-Harness on twx-easy with the embedded model: baseline harness vs the best found, context tokens per
episode of each frontier member, and evaluation spent per admitted candidate with and without staged
evaluation. Prints one table per run and a comparison.

    .venv/bin/python bench/metaharness_twx.py [--runs embedded,replay,replay-unstaged] [--iterations 2]
                                              [--per-category 2] [--max-steps N] [--games a,b]

Runs, each in a fresh store (nothing is shared through the evaluation cache):
  embedded         SmolLM2-135M in every role, the meta-harness proposer in single-call mode: what the
                   embedded default does on its own.
  replay           the executor is the embedded model; the proposer role replays hand-written harness
                   changes (an environment snapshot in the context, a no-repeat memory, a terse history)
                   through the scripted backend, so the pipeline (checks, sandboxed smoke, staged
                   evaluation, frontier) is measured on proposals known to differ from the seed.
  replay-unstaged  the same proposals with ``loop.staged = false``: every checked candidate plays all of dev.

"Episodes per admitted candidate" counts every episode the run played for candidates (smoke, probe, dev)
divided by the number admitted; cached episodes are not played and not counted.
"""
from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import tempfile
from pathlib import Path

from evolver import open_run, open_workspace, plugins
from evolver.config import Config, RoleConfig
from evolver.harness import SEED_DIR
from evolver.loop import run_loop
from evolver.store import Store

SEED = (SEED_DIR / "harness" / "harness.py").read_text()


def _edit(code: str, old: str, new: str) -> str:
    if old not in code:
        raise SystemExit(f"bench: the seed harness changed; cannot find {old!r}")
    return code.replace(old, new)


ACTIONS_LINE = '        actions = obs.actions if actions is None else actions\n'
SNAPSHOT = _edit(SEED, ACTIONS_LINE, (
    "        # twx reports the room and the inventory beside each observation: after 'take apple' the\n"
    "        # observation alone no longer says where the agent is or what it holds.\n"
    "        facts = [f\"{k.title()}: {str(obs.info.get(k, '')).strip()[:600]}\" for k in ('look', 'inventory')\n"
    "                 if str(obs.info.get(k, '')).strip()]\n"
    "        if facts:\n"
    "            lines.append('Environment snapshot:\\n' + '\\n'.join(facts))\n") + ACTIONS_LINE)
NO_REPEAT = _edit(SEED, '            held = {a for a in obs.actions if (key, a) in state["tried"]} if LOOP_GUARD else set()\n',
                  '            held = {a for a, _ in state["history"]}  # the whole episode, whatever the state\n')
TERSE = _edit(SEED, '            shown = [f"> {a}\\n{o[:300]}" for a, o in recent[:-1]] + [f"> {recent[-1][0]}"]\n',
              '            shown = [f"> {a}" for a, _ in recent]\n')
REPLAYED = [
    ("context: an environment snapshot (room and inventory) in every prompt",
     "after an action the observation says only what happened, so the model forgets the room and what it "
     "holds and picks actions that do not apply", SNAPSHOT),
    ("memory: no action is offered twice in one episode",
     "the traces show the model cycling between a few actions (open/close, look) until the step limit", NO_REPEAT),
    ("context: the history shows actions only, not their observations",
     "the history's observations cost most of the context tokens and repeat what the snapshot says", TERSE),
]


def replay_rule():
    """The proposer role's answers: the replayed harnesses in order, one per proposal call."""
    order = itertools.cycle(REPLAYED)

    def rule(req):
        mechanism, hypothesis, code = next(order)
        return f"PARENT: seed\nHYPOTHESIS: {hypothesis}\nMECHANISM: {mechanism}\n```python\n{code}```\n"
    return rule


def config(kind: str, store: Path, args) -> Config:
    roles = {r: RoleConfig() for r in ("executor", "proposer", "builder", "judge")}
    options = {"prompt_budget": 1500, "answer_tokens": 1200}  # the 135M model's context is 8k tokens
    if kind.startswith("replay"):
        roles["proposer"] = RoleConfig(backend="scripted", options={"rule": replay_rule()})
    bench = ({"suite": "twx-easy"} | ({"max_steps": args.max_steps} if args.max_steps else {})
             | ({"games": args.games} if args.games else {}))
    return Config(benchmark="twx", benchmark_options=bench, store=str(store), roles=roles,
                  seed_skills=["twx-experts"],  # twx's hand-written pack (opt-in), as measured
                  proposers=["meta-harness"], plugins={"meta-harness": options},
                  loop={"iterations": args.iterations, "dev_per_category": args.per_category,
                        "test_per_category": args.per_category, "candidates_per_iteration": 2,
                        "patience": args.iterations, "max_wall_s": 3600, "staged": kind != "replay-unstaged"})


def measure(kind: str, args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix=f"evolver-mh-{kind}-"))
    cfg = config(kind, tmp, args)
    try:
        with open_run(cfg, record=False) as run:  # run_loop records the run and seeds the workspace
            run_loop(run)
            return collect(kind, run.store, run.id)
    finally:
        if args.keep:
            print(f"{kind}: store kept at {tmp}", file=sys.stderr, flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def collect(kind: str, store: Store, run_id: str) -> dict:
    """The numbers of one finished run, all read back from its store."""
    summary = store.get_run(run_id)["summary"]
    props = store.proposals(run_id)
    cands = [p["candidate_id"] for p in props]
    _, rows = store.query("SELECT program_id, purpose, count(*) FROM episodes WHERE run_id = ? GROUP BY 1, 2",
                          [run_id])
    played = {(pid, purpose): n for pid, purpose, n in rows}
    test = summary["test"]
    frontier = [(m["program_id"], m["metrics"]["score"], m["metrics"]["context_tokens"],
                 test.get(m["program_id"], {}).get("score"), test.get(m["program_id"], {}).get("context_tokens"))
                for m in summary["frontier"]["members"]]
    return {"kind": kind, "wall_s": summary["wall_s"], "proposals": props,
            "admitted": sum(p["status"] == "admitted" for p in props), "episodes": sum(played.values()),
            "candidate_episodes": sum(n for (pid, _), n in played.items() if pid in cands),
            "baseline": test["seed"], "best_id": summary["best"], "best": test[summary["best"]],
            "frontier": frontier, "report": summary["report"]}


def summarize_kept(folders: list[str]) -> list[dict]:
    """``--summarize DIR...``: the tables of runs kept with ``--keep`` (kind from the folder name)."""
    out = []
    for folder in folders:
        kind = Path(folder).name.removeprefix("evolver-mh-").rsplit("-", 1)[0]
        with open_workspace(folder, read_only=True)[0] as store:
            run = store.latest_run(status="finished")
            if run is None:
                print(f"{folder}: no finished run", file=sys.stderr)
                continue
            out.append(collect(kind, store, run["run_id"]))
    return out


def show(r: dict) -> None:
    print(f"\n## {r['kind']}  ({r['wall_s']:.0f} s wall, {r['episodes']} episodes played)")
    print("| candidate | iteration | mechanism | status | dev score | reason |\n|---|---|---|---|---|---|")
    for p in r["proposals"]:
        score = (p.get("scores") or {}).get("score", (p.get("scores") or {}).get("probe_score"))
        reason = (p.get("reason") or "").splitlines()[0][:70] if p.get("reason") else ""
        print(f"| {p['candidate_id']} | {p['iteration']} | {(p.get('detail') or {}).get('mechanism', '')[:60]} | "
              f"{p['status']} | {'' if score is None else f'{score:.3f}'} | {reason} |")
    print("\n| frontier member | dev score | dev context tokens/episode | test score | test context tokens/episode |")
    print("|---|---|---|---|---|")
    for pid, dev, tok, tscore, ttok in r["frontier"]:
        print(f"| {pid} | {dev:.3f} | {tok:.0f} | {tscore if tscore is None else f'{tscore:.3f}'} | "
              f"{ttok if ttok is None else f'{ttok:.0f}'} |")
    per = r["candidate_episodes"] / r["admitted"] if r["admitted"] else float("nan")
    print(f"\nbaseline (seed) test score {r['baseline']['score']:.3f} ({r['baseline']['context_tokens']:.0f} context "
          f"tokens/episode); best on dev {r['best_id']}: test {r['best']['score']:.3f} "
          f"({r['best']['context_tokens']:.0f} tokens/episode)")
    print(f"candidate episodes {r['candidate_episodes']}, admitted {r['admitted']}: {per:.1f} episodes per admitted "
          f"candidate; report {r['report']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="embedded,replay,replay-unstaged")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--games", default=None, help="a subset of twx-easy's games, e.g. twc,arithmetic")
    ap.add_argument("--keep", action="store_true", help="keep each run's store (its path is printed)")
    ap.add_argument("--summarize", nargs="+", metavar="DIR", help="print the tables of runs kept with --keep")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # each run's table appears when it is done
    if args.summarize:
        results = summarize_kept(args.summarize)
        for r in results:
            show(r)
        compare(results)
        return
    if "meta-harness" not in plugins.registries()["proposer"].names():  # not pip-installed: load it from the tree
        plugins.load_local(Path(__file__).resolve().parents[1] / "plugins" / "metaharness" / "evolver_metaharness")
    results = []
    for kind in args.runs.split(","):
        print(f"running {kind} ...", file=sys.stderr, flush=True)
        results.append(measure(kind.strip(), args))
        show(results[-1])
    compare(results)


def compare(results: list[dict]) -> None:
    if len(results) > 1:
        print("\n| run | baseline test | best test | admitted | candidate episodes | per admitted | wall s |")
        print("|---|---|---|---|---|---|---|")
        for r in results:
            per = f"{r['candidate_episodes'] / r['admitted']:.1f}" if r["admitted"] else "-"
            print(f"| {r['kind']} | {r['baseline']['score']:.3f} | {r['best']['score']:.3f} ({r['best_id']}) | "
                  f"{r['admitted']} | {r['candidate_episodes']} | {per} | {r['wall_s']:.0f} |")


if __name__ == "__main__":
    main()
