"""Learn where twc's objects go from the train fold, for the ``usual-place`` skill.

twc asks to put objects away "in their usual locations", and its test fold holds out the objects the
train fold uses: a table of train answers does not cover a test object, but a near neighbour does ("a
clean red shirt" goes where "a clean brown shirt" went). This walks the gold paths of train seeds, keeps
each (object, place) a gold path put down and every piece of furniture the rooms described, and writes
them with the objects' embeddings (all-MiniLM-L6-v2, the model the skill embeds new objects with)::

    python -m evolver_twx.places [SKILL_FOLDER] [--per-suite 1000]

(default folder: the ``twx-experts`` pack's ``usual-place``, a hand-written skill). Mined from twx's gold
paths, so this data is benchmark knowledge: the pack is opt-in (``seed_skills=twx-experts``).

Only the train fold is read; dev and test seeds never are."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from evolver_twx.benchmark import SUITES, TwxBenchmark

PHRASE = re.compile(r"(?:you see|There is also|You also see) an? ([A-Za-z][A-Za-z\- ]*?)(,? that [^.]*)?\.")


def mine(per_suite: int) -> tuple[list[tuple[str, str]], set[str]]:
    pairs, furniture, items = {}, set(), set()
    for suite in SUITES:
        bench = TwxBenchmark(suite, games="twc")
        try:
            for task in bench.tasks("train", per_suite):
                env = bench.env(task)
                texts = [env.reset().text]
                for action in task.gold:
                    texts.append(env.step(action).text)
                    if action.startswith("put ") and " in " in action:
                        thing, place = action[4:].split(" in ", 1)
                        pairs[(thing, place)] = None
                    elif action.startswith("take "):
                        items.add(action[5:])
                env.close()
                for text in texts:
                    furniture |= {name for name, _ in PHRASE.findall(text)}
        finally:
            bench.close()
    return list(pairs), furniture - items


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("skill", type=Path, nargs="?", default=Path(__file__).parent / "packs" / "twx-experts"
                        / "usual-place", help="the usual-place skill's folder (default: the twx-experts pack's)")
    parser.add_argument("--per-suite", type=int, default=1000, help="train seeds per suite (at most 1000)")
    args = parser.parse_args(argv)
    pairs, furniture = mine(args.per_suite)
    from evolver import load_embedder
    vectors = load_embedder("all-MiniLM-L6-v2").encode([f"a {thing}" for thing, _ in pairs])
    (args.skill / "places.json").write_text(json.dumps(
        {"source": f"twx train fold, twc gold paths, {args.per_suite} seeds per suite",
         "furniture": sorted(furniture), "places": pairs}, indent=0) + "\n")
    # int8 (unit vectors times 127): a skill folder is capped at 200 kB, and the ranking does not notice
    np.save(args.skill / "places.npy", np.round(vectors * 127).astype(np.int8))
    print(f"{len(pairs)} object places, {len(furniture)} pieces of furniture -> {args.skill}")


if __name__ == "__main__":
    main()
