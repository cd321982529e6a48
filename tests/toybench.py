"""A deterministic benchmark and scripted roles for loop tests: the answer is the word in UPPERCASE,
and the scripted executor only knows that when a skill in its context tells it so."""
from __future__ import annotations

from evolver.benchmarks.base import Benchmark, Env
from evolver.hookspecs import hookimpl
from evolver.types import ChoiceRequest, Observation, Task

WORDS = ["apple", "river", "stone", "cloud", "maple", "tiger", "piano", "ocean", "lemon", "eagle", "amber", "delta"]


class UpperEnv(Env):
    def __init__(self, task: Task):
        self.task = task

    def reset(self) -> Observation:
        return Observation(self.task.prompt)

    def step(self, action: str) -> Observation:
        ok = action.strip() == self.task.gold
        return Observation("correct" if ok else "wrong", score=1.0 if ok else 0.0, done=True, info={"won": ok})


class UpperBench(Benchmark):
    name = "upper"
    categories = ["fruit", "nature"]
    max_steps = 1

    def __init__(self, size: int = 4, **_):
        self.size = size  # tasks per split; words repeat with a number after the first dozen

    def tasks(self, split, per_category=None):
        offset = {"train": 0, "dev": 1, "test": 2}[split] * self.size
        words = [WORDS[j % len(WORDS)] + (str(j // len(WORDS)) if j >= len(WORDS) else "")
                 for j in range(offset, offset + self.size)]
        out = []
        for i, w in enumerate(words):
            cat = self.categories[i % 2]
            out.append(Task(id=f"upper/{split}/{i}", benchmark="upper", split=split, category=cat, seed=i,
                            prompt=f"Answer with the word: {w}", gold=w.upper()))
        per = per_category or 99
        return [t for c in self.categories for t in out if t.category == c][: per * len(self.categories)]

    def env(self, task):
        return UpperEnv(task)


@hookimpl
def register_benchmarks(register):
    register("upper", UpperBench, "toy benchmark for tests")


GOOD_BODY = "Answer with the word in UPPERCASE letters.\n2. Check every letter is a capital."


def make_rule(body: str = GOOD_BODY, description: str = "Use when asked to answer with a word.",
              plan: str = "ACTION: create\nSKILL: shout-words\nWHY: answers were lowercase\nIDEA: uppercase them"):
    """One rule for every role: the executor, the proposer and the builder."""
    def rule(req):
        if isinstance(req, ChoiceRequest):
            return req.options[0]
        text = "\n".join(m.content for m in req.messages)
        if "ACTION: create or edit" in text:
            return plan
        if text.rstrip().endswith("Assertions:"):  # the surrogate verifier
            return "ASSERT: correct\nASSERT NOT: wrong"
        if text.rstrip().endswith("Description:"):
            return description
        if "numbered steps" in text:
            return body
        word = text.rsplit("Answer with the word:", 1)[-1].split()[0] if "Answer with the word:" in text else ""
        system = req.messages[0].content if req.messages else ""
        return word.upper() if "UPPERCASE" in system else word
    return rule


@hookimpl
def register_backends(register):
    from evolver.backends.scripted import ScriptedBackend

    def toyrule(model=None, delay: float = 0.0, **_):
        rule = make_rule()

        def slow_rule(req):
            if delay:
                import time
                time.sleep(delay)
            return rule(req)
        return ScriptedBackend(rule=slow_rule, model="toyrule")
    register("toyrule", toyrule, "scripted roles for the upper benchmark")


@hookimpl
def on_episode_end(run, episode):
    """Lets a test watch a run from outside (the store is locked while it runs)."""
    import os
    from pathlib import Path

    marks = os.environ.get("TOY_MARK_DIR")
    if marks and not episode.cached:
        Path(marks, f"{episode.purpose}-{episode.program_id}-{episode.id}").write_text(episode.task.id)
