"""How a model should pick its actions on twx-easy: the default harness's three action modes, side by
side on the same dev episodes with the same model.

- ``likelihood``: rank the valid actions by log-likelihood (``WRITE_CHOICE = False``);
- ``write+match``: write an action, play the valid action nearest to it (``WRITE_CHOICE = True``, the
  default);
- ``free``: write an action and play it as written (``CHOOSE_ACTIONS = False``).

    .venv/bin/python bench/action_modes.py [--model PATH] [--per-category 4]

``--model`` is an HF folder, e.g. a checkpoint of ``evolver train --sft``
(``<store>/checkpoints/<run>/sft-step-N``); the default is the embedded SmolLM2-135M-Instruct.
Each game plays to its own step limit, as ``evolver eval`` does.
"""
from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from evolver import open_run
from evolver.config import Config, RoleConfig
from evolver.evaluate import run_episodes, summarize
from evolver.types import stable_hash

MODES = {"likelihood": (True, False), "write+match": (True, True), "free": (False, True)}  # CHOOSE_ACTIONS, WRITE_CHOICE


def set_mode(harness: str, mode: str) -> str:
    """The seed harness's source with its action-mode constants set for ``mode``."""
    choose, write = MODES[mode]
    for name, value in (("CHOOSE_ACTIONS", choose), ("WRITE_CHOICE", write)):
        harness, n = re.subn(rf"^{name} = (True|False)\b", f"{name} = {value}", harness, flags=re.M)
        assert n == 1, f"the harness has no {name} constant"
    return harness


@contextmanager
def seed_workspace(max_steps: int | None = None, **config):
    """A throwaway workspace on twx-easy with the seed program: yields (folder, run, seed), then closes
    the run and deletes the folder. The seed carries twx's hand-written pack (``seed_skills=twx-experts``,
    as these benchmarks were measured) unless ``seed_skills`` is given."""
    tmp = Path(tempfile.mkdtemp(prefix="evolver-bench-"))
    config.setdefault("seed_skills", ["twx-experts"])  # opt-in, hand-written: a comparison, not the default
    options = {"suite": "twx-easy", **({"max_steps": max_steps} if max_steps is not None else {})}
    try:
        with open_run(Config(store=str(tmp), benchmark_options=options, **config)) as run:
            yield tmp, run, run.repo.checkout("seed")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="HF folder to evaluate (default: the embedded model)")
    ap.add_argument("--per-category", type=int, default=4)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--lookup", default=None,
                    help="prompt-lookup draft sizes to compare, e.g. 0,8 (default: the backend's)")
    args = ap.parse_args()
    with seed_workspace(roles={"executor": RoleConfig(model=args.model)}) as (_, run, seed):
        tasks = run.benchmark.tasks("dev", per_category=args.per_category)
        backend = run.backend("executor")
        harness_file = Path(seed.root) / "harness" / "harness.py"
        original = harness_file.read_text()
        rows = []
        lookups = [int(x) for x in args.lookup.split(",")] if args.lookup else [None]
        for mode in args.modes.split(","):
            for lookup in lookups:
                if lookup is not None:
                    backend.inner.lookup = lookup
                harness_file.write_text(set_mode(original, mode))
                seed.hash = stable_hash(mode, time.time())  # a fresh cache key per mode
                start = time.perf_counter()
                eps = run_episodes(run.context(seed), run.benchmark, backend, tasks, store=run.store, run=run,
                                   use_cache=False)
                ev = summarize(seed.id, "dev", eps)
                label = mode if lookup is None else f"{mode} lookup={lookup}"
                rows.append((label, ev, time.perf_counter() - start))
        harness_file.write_text(original)
    cats = sorted(rows[0][1].per_category)
    print(f"twx-easy dev, {len(tasks)} episodes, model {args.model or 'embedded SmolLM2-135M-Instruct'}")
    print(f"{'mode':20} {'score':>6} {'won':>5} {'wall s':>7}  " + " ".join(f"{c[:11]:>11}" for c in cats))
    for mode, ev, wall in rows:
        print(f"{mode:20} {ev.score:6.3f} {round(ev.success * ev.n):5d} {wall:7.1f}  "
              + " ".join(f"{ev.per_category[c]:11.2f}" for c in cats))


if __name__ == "__main__":
    main()
