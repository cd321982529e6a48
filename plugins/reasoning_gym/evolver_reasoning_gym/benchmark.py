"""The reasoning-gym benchmark: each generator is a task category; a task is one question.

Splits come from seeds (``seed``, ``seed+1``, ``seed+2`` for train, dev, test); generators with a
small problem space repeat questions across seeds, so a dev question already in train, or a test
question in train or dev, is dropped: the splits never share a task. Scoring is the generator's own
``score_answer`` on the extracted answer (0..1, partial credit where the generator gives it).
"""
from __future__ import annotations

import re

from evolver import Benchmark, BenchmarkError, Env, Observation, Task

DEFAULT_DATASETS = ["basic_arithmetic", "chain_sum", "gsm_symbolic"]
SPLIT_OFFSET = {"train": 0, "dev": 1, "test": 2}
INSTRUCTION = "Give only the final answer."
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def extract_answer(text: str) -> str:
    """The answer in a reply: an <answer> tag if any, else after 'answer is'/'=' , else the whole line."""
    text = (text or "").strip()
    tag = re.search(r"<answer>(.*?)</answer>", text, re.S)
    if tag:
        return tag.group(1).strip()
    m = re.search(r"(?:answer is|answer:|=)\s*([^\n]+)$", text, re.I)
    candidate = (m.group(1) if m else text.splitlines()[0] if text else "").strip().rstrip(".")
    return candidate


class _Env(Env):
    def __init__(self, task: Task, entry: dict, dataset):
        self.task, self.entry, self.dataset = task, entry, dataset

    def reset(self) -> Observation:
        return Observation(self.task.prompt)

    def step(self, action: str) -> Observation:
        answer = extract_answer(action)
        try:
            score = float(self.dataset.score_answer(answer, self.entry))
        except Exception:  # noqa: BLE001 - a generator's scorer choking on odd text scores 0
            score = 0.0
        if score < 1.0:  # "The answer is 12." style replies: try the last number too
            nums = _NUMBER.findall(action or "")
            if nums:
                try:
                    score = max(score, float(self.dataset.score_answer(nums[-1], self.entry)))
                except Exception:  # noqa: BLE001
                    pass
        return Observation("correct" if score >= 1.0 else f"wrong: you answered {answer!r}", score=score, done=True,
                           info={"won": score >= 1.0, "rewards": {"answered": 1.0 if answer else 0.0}})


class ReasoningGym(Benchmark):
    name = "reasoning-gym"
    max_steps = 1

    def __init__(self, datasets: list[str] | None = None, size: int = 50, seed: int = 0,
                 configs: dict[str, dict] | None = None, split_sizes: dict[str, int] | None = None, **_):
        """``size`` questions per generator and split (``split_sizes`` overrides it per split, e.g. a
        small train split keeps most of a small problem space for dev and test)."""
        try:
            import reasoning_gym
        except ImportError as exc:
            raise BenchmarkError("the reasoning-gym benchmark needs the reasoning-gym package: "
                                 "pip install -e plugins/reasoning_gym (or pip install reasoning-gym)") from exc
        self._rg = reasoning_gym
        self.datasets = list(datasets or DEFAULT_DATASETS)
        self.categories = self.datasets
        self.size, self.seed, self.configs = int(size), int(seed), dict(configs or {})
        self.split_sizes = {k: int(v) for k, v in (split_sizes or {}).items()}
        bad = set(self.split_sizes) - set(SPLIT_OFFSET)
        if bad:
            raise BenchmarkError(f"split_sizes names unknown splits {sorted(bad)}; use train, dev, test")
        from reasoning_gym.factory import DATASETS

        unknown = [d for d in self.datasets if d not in DATASETS]
        if unknown:
            raise BenchmarkError(f"unknown reasoning-gym dataset(s) {unknown}; e.g. {', '.join(DEFAULT_DATASETS)} "
                                 f"({len(DATASETS)} known: python -c 'import reasoning_gym.factory as f; "
                                 "print(sorted(f.DATASETS))')")
        self._data: dict[tuple[str, str], object] = {}
        self._tasks: dict[str, list[Task]] = {}

    def _dataset(self, name: str, split: str):
        key = (name, split)
        if key not in self._data:
            self._data[key] = self._rg.create_dataset(name, size=self.split_sizes.get(split, self.size),
                                                      seed=self.seed * 10 + SPLIT_OFFSET[split],
                                                      **self.configs.get(name, {}))
        return self._data[key]

    def _split(self, split: str) -> list[Task]:
        if split not in SPLIT_OFFSET:
            raise BenchmarkError(f"unknown split {split!r}; use train, dev or test")
        if split not in self._tasks:
            earlier = {t.prompt for s in SPLIT_OFFSET if SPLIT_OFFSET[s] < SPLIT_OFFSET[split] for t in self._split(s)}
            tasks = []
            for name in self.datasets:
                ds = self._dataset(name, split)
                for i in range(len(ds)):
                    entry = ds[i]
                    prompt = f"{entry['question'].strip()}\n{INSTRUCTION}"
                    if prompt in earlier:
                        continue
                    tasks.append(Task(id=f"rg/{name}/{split}/{i}", benchmark=self.name, split=split, category=name,
                                      seed=i, prompt=prompt, gold=str(entry["answer"]), meta={"index": i}))
            self._tasks[split] = tasks
        return self._tasks[split]

    def tasks(self, split: str, per_category: int | None = None) -> list[Task]:
        tasks = self._split(split)
        if per_category is None:
            return list(tasks)
        out = []
        for name in self.datasets:
            out += [t for t in tasks if t.category == name][:per_category]
        return out

    def env(self, task: Task) -> Env:
        ds = self._dataset(task.category, task.split)
        return _Env(task, ds[task.meta["index"]], ds)
