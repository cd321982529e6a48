"""Shared-KV ``choose`` vs the naive per-option forward pass, on the real embedded model.

Each step is a TextWorld-like prompt (~400 tokens: instructions, history, observation, the list
of valid actions) with 10-30 options. Prints per-step times, totals, the speed-up, and whether
both ways pick the same option (they should: same maths, bf16 noise aside).

    .venv/bin/python bench/choose_speed.py [--steps 20] [--dtype auto] [--threads N]
"""
from __future__ import annotations

import argparse
import random
import time

from evolver.types import ChoiceRequest, Message
from evolver_transformers.backend import TransformersBackend

ROOMS = ["kitchen", "pantry", "living room", "bedroom", "bathroom", "garden", "shed", "corridor"]
THINGS = ["red apple", "yellow potato", "carrot", "cookbook", "knife", "frying pan", "bowl", "lamp",
          "blue key", "old newspaper", "chair", "fridge", "oven", "stove", "table", "counter", "box"]
VERBS = ["take", "drop", "examine", "open", "close", "eat", "put {} in box", "cook {} with stove", "slice {} with knife"]


def make_step(rng: random.Random, n_options: int) -> ChoiceRequest:
    room = rng.choice(ROOMS)
    history = "\n".join(f"> {rng.choice(['look', 'inventory', 'go north', 'take knife', 'open fridge'])}\n"
                        f"You are in the {rng.choice(ROOMS)}. You see a {rng.choice(THINGS)} and a "
                        f"{rng.choice(THINGS)}. Nothing happens." for _ in range(6))
    options = set()
    while len(options) < n_options:
        verb = rng.choice(VERBS)
        thing = rng.choice(THINGS)
        options.add(verb.format(thing) if "{}" in verb else f"{verb} {thing}")
        if rng.random() < 0.2:
            options.add(f"go {rng.choice(['north', 'south', 'east', 'west'])}")
    options = sorted(options)[:n_options]
    user = (f"You are playing a text adventure. Goal: find the recipe, gather the ingredients, prepare "
            f"the meal and eat it. Score points by making progress.\n\nRecent history:\n{history}\n\n"
            f"Observation: You are in the {room}. You see a {', a '.join(rng.sample(THINGS, 6))}. "
            f"Exits lead north and east.\n\nValid actions:\n" + "\n".join(f"- {o}" for o in options) +
            "\n\nReply with exactly one valid action.")
    return ChoiceRequest(messages=[Message("system", "You are an expert text adventure player."),
                                   Message("user", user)], options=options)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    b = TransformersBackend(dtype=args.dtype, threads=args.threads)
    rng = random.Random(0)
    steps = [make_step(rng, rng.randint(10, 30)) for _ in range(args.steps)]
    b.choose(steps[:1])  # warm-up (first-call allocations), not timed
    print(f"model {b.model}, dtype {args.dtype}")
    print(f"{'step':>4} {'prompt':>6} {'opts':>4} {'shared s':>9} {'naive s':>8} {'same pick':>9} {'max |d|':>8}")
    tot_s = tot_n = 0.0
    agree = 0
    for i, req in enumerate(steps):
        t0 = time.perf_counter()
        s = b.choose([req])[0]
        t1 = time.perf_counter()
        n = b.choose_naive([req])[0]
        t2 = time.perf_counter()
        tot_s += t1 - t0
        tot_n += t2 - t1
        agree += s.index == n.index
        diff = max(abs(x - y) for x, y in zip(s.scores, n.scores))
        print(f"{i:>4} {s.prompt_tokens:>6} {len(req.options):>4} {t1 - t0:>9.3f} {t2 - t1:>8.3f} "
              f"{str(s.index == n.index):>9} {diff:>8.4f}")
    print(f"total: shared {tot_s:.2f} s, naive {tot_n:.2f} s, speed-up {tot_n / tot_s:.1f}x, "
          f"same pick {agree}/{len(steps)}")


if __name__ == "__main__":
    main()
