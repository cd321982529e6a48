"""Prompt-lookup drafts on the proposer's own calls: none vs greedy rows only (the backend before
sampled rows could draft) vs every row, side by side on the same requests.

The requests are recorded from one iteration of ``evolver run`` on the built-in default (EvoSkill's
batches: candidate 0 greedy, the later ones sampled at 0.7 with fixed seeds), then replayed with a
cold prompt cache each time. A sampled row picks each token by its exponential race (``Race``), so in
fp32 every configuration must give the same replies, which the script checks; in bf16 a forward's
shape can tip a near-tie, and a tipped sampled reply goes its own way from there.

    .venv/bin/python bench/sampled_drafts.py [--dtype fp32] [--passes 1] [--requests FILE]
"""
from __future__ import annotations

import argparse
import pickle
import shutil
import tempfile
import time
from pathlib import Path

from evolver_transformers import backend as tb


def record(path: Path) -> None:
    """One iteration of ``evolver run`` in a throwaway store; every batch with a sampled request."""
    seen = []
    generate = tb.TransformersBackend.generate

    def spy(self, requests):
        if any(r.temperature > 0 for r in requests):
            seen.append(list(requests))
        return generate(self, requests)
    tb.TransformersBackend.generate = spy
    store = Path(tempfile.mkdtemp(prefix="evolver-bench-"))
    try:
        from evolver.cli import cli
        cli(["--store", str(store), "run", "--iterations", "1"], standalone_mode=False)
    finally:
        tb.TransformersBackend.generate = generate
        shutil.rmtree(store, ignore_errors=True)
    path.write_bytes(pickle.dumps(seen))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="fp32", help="fp32 (replies must match) or bf16")
    ap.add_argument("--passes", type=int, default=1, help="passes over the three rows (each keeps its best)")
    ap.add_argument("--requests", default=None, help="a pickle of recorded batches (default: record them now)")
    args = ap.parse_args()
    path = Path(args.requests or Path(tempfile.mkdtemp(prefix="evolver-bench-")) / "requests.pkl")
    if not path.exists():
        record(path)
    batches = pickle.loads(path.read_bytes())
    backend = tb.TransformersBackend(dtype=args.dtype)
    sampled = {tuple(backend.chat_ids(r.messages)) for b in batches for r in b if r.temperature > 0}
    lookup = tb.PromptLookup

    class NoDraft(lookup):
        def draft(self, reply, k):
            return []
    rows: dict[str, tuple] = {}
    for _ in range(args.passes):
        for name in ("none", "greedy rows", "every row"):
            backend.lookup = 0 if name == "none" else 8
            tb.PromptLookup = ((lambda p: NoDraft(p) if tuple(p) in sampled else lookup(p))
                               if name == "greedy rows" else lookup)
            texts, wall, forwards = [], 0.0, 0
            for reqs in batches:
                backend._prefixes.clear()
                backend.timing.clear()
                start = time.perf_counter()
                texts.append([r.text for r in backend.generate(reqs)])
                wall += time.perf_counter() - start
                forwards += backend.timing["decode_steps"]
            if name not in rows or wall < rows[name][0]:
                rows[name] = (wall, forwards, texts)
    tb.PromptLookup = lookup
    shapes = ", ".join("[" + " ".join(f"{'s' if r.temperature > 0 else 'g'}{r.max_tokens}" for r in b) + "]"
                       for b in batches)
    print(f"{len(batches)} recorded proposer batches ({shapes}: g greedy, s sampled, max tokens), "
          f"SmolLM2-135M {args.dtype} on CPU")
    print(f"{'drafts for':12} {'wall s':>7} {'forwards':>9} {'replies as with none':>21}")
    base = rows["none"][2]
    for name, (wall, forwards, texts) in rows.items():
        same = sum(a == b for x, y in zip(texts, base) for a, b in zip(x, y))
        print(f"{name:12} {wall:7.1f} {forwards:9d} {same:>14d} of {sum(map(len, base))}")
    print(f"every row vs greedy rows: {rows['greedy rows'][0] / rows['every row'][0]:.2f}x; "
          f"vs none: {rows['none'][0] / rows['every row'][0]:.2f}x")


if __name__ == "__main__":
    main()
