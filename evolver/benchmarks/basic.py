"""``basic``: a zero-dependency benchmark, the fallback when a benchmark plugin's engine is missing.

Three seeded generators; every task is a pure function of (category, seed), so ids are stable.

- ``arithmetic``: a short word problem, single turn, the answer is an integer.
- ``units``: a unit conversion, single turn, the answer a number rounded as the question states.
- ``kb-hops``: a 2-4 hop question over a small generated knowledge base ("Who is the manager of the
  owner of the red bicycle?"), multi-turn: ``lookup <entity> <relation>`` reads one fact,
  ``answer <entity>`` ends the episode. ``Observation.actions`` lists the lookups for the entities seen
  so far and an answer option for each, so a small model can choose instead of write.

Scoring. Single-turn: the last number in the reply is the answer (lenient parsing), exact match gives 1,
anything else 0 (units: correct when within half a unit of the stated rounding). kb-hops: the right
answer gives 1; before that, each gold-path fact looked up earns 0.5 / hops, kept if the episode ends
with a wrong answer or at the step limit (hops + 4), so a partly right search still gets signal.

Splits are disjoint seed ranges: train 0.., dev 1_000_000.., test 2_000_000..; ``tasks(split, n)`` takes
the first ``n`` seeds per category (``n=None``: 50). Task.gold: the answer string for single-turn tasks,
the gold action list (ending in ``answer X``) for kb-hops, whose answer is also in ``meta['answer']``.
"""
from __future__ import annotations

import random
import re
from decimal import ROUND_HALF_UP, Decimal

from evolver.benchmarks.base import SPLITS, Benchmark, Env
from evolver.errors import BenchmarkError, UnknownNameError
from evolver.types import Observation, Task

DEFAULT_PER_CATEGORY = 50
SPLIT_BASE = {"train": 0, "dev": 1_000_000, "test": 2_000_000}
CATEGORIES = ["arithmetic", "units", "kb-hops"]
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+")

NAMES = ["Ana", "Ben", "Chen", "Dana", "Eli", "Fay", "Gus", "Hana", "Ivo", "June", "Kai", "Lena",
         "Milo", "Nia", "Omar", "Pia", "Raj", "Sara", "Tom", "Uma", "Vera", "Wes", "Yara", "Zed"]
SURNAMES = ["Ito", "Moreno", "Okafor", "Park", "Silva", "Novak", "Berg", "Khan", "Lund", "Rossi"]
ITEMS = ["apple", "marble", "sticker", "pencil", "cookie", "stamp", "shell", "card"]
COLORS = ["red", "blue", "green", "yellow", "black", "white", "orange", "purple"]
THINGS = ["bicycle", "umbrella", "guitar", "backpack", "kettle", "lamp", "scooter", "telescope"]
CITIES = ["Avalon", "Brookfield", "Cedar Bay", "Dunmore", "Eastwick", "Fairhaven", "Glenrock", "Harlow"]
FIRMS = ["Acme", "Borealis", "Cobalt", "Dynamo", "Everest", "Fulcrum", "Granite", "Helix"]


def parse_number(text: str) -> Decimal | None:
    """The last number in ``text`` (commas as thousands separators), or None."""
    found = _NUMBER.findall(str(text))
    return Decimal(found[-1].replace(",", "")) if found else None


# -- single-turn generators: rng -> (question, gold answer string, decimals) ---------------------
def _arithmetic(rng: random.Random) -> tuple[str, str, int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    kind = rng.randrange(6)
    if kind == 0:
        a, b, c = rng.randint(3, 30), rng.randint(2, 6), rng.randint(2, 9)
        d = rng.randint(1, a + b * c - 1)
        q = (f"{name} has {a} {item}s, buys {b} packs of {c} {item}s each, then gives {d} {item}s "
             f"to a friend. How many {item}s does {name} have now?")
        return q, str(a + b * c - d), 0
    if kind == 1:
        p, n = rng.randint(2, 15), rng.randint(2, 6)
        bill = next(b for b in (20, 50, 100, 200) if b >= p * n)
        q = (f"A shop sells {item}s for {p} dollars each. {name} buys {n} of them and pays with a "
             f"{bill}-dollar bill. How many dollars of change does {name} get?")
        return q, str(bill - p * n), 0
    if kind == 2:
        a, days, b = rng.randint(5, 40), rng.randint(2, 9), rng.randint(1, 30)
        q = (f"{name} reads {a} pages a day for {days} days and then {b} pages on the next day. "
             "How many pages did " + name + " read in total?")
        return q, str(a * days + b), 0
    if kind == 3:
        r, c = rng.randint(3, 12), rng.randint(4, 15)
        t = rng.randint(1, r * c - 1)
        q = (f"A hall has {r} rows of {c} chairs. {t} chairs are taken. How many chairs are free?")
        return q, str(r * c - t), 0
    if kind == 4:
        k, each = rng.randint(2, 9), rng.randint(2, 12)
        q = (f"{name} shares {k * each} {item}s equally among {k} friends. How many {item}s does "
             "each friend get?")
        return q, str(each), 0
    speed, hours, extra = rng.randint(20, 90), rng.randint(2, 5), rng.randint(5, 60)
    q = (f"A train travels at {speed} km per hour for {hours} hours, then {extra} km more. "
         "How many km did it travel in total?")
    return q, str(speed * hours + extra), 0


# (from, to, factor or None for Celsius->Fahrenheit, what is measured)
_UNITS = [("kilometers", "meters", "1000", "a trail"), ("meters", "centimeters", "100", "a rope"),
          ("kilograms", "grams", "1000", "a parcel"), ("hours", "minutes", "60", "a trip"),
          ("liters", "milliliters", "1000", "a jug"), ("miles", "kilometers", "1.609344", "a road"),
          ("inches", "centimeters", "2.54", "a board"), ("pounds", "kilograms", "0.45359237", "a bag"),
          ("feet", "meters", "0.3048", "a fence"), ("grams", "kilograms", "0.001", "a letter"),
          ("degrees Celsius", "degrees Fahrenheit", None, "the water")]


def _units(rng: random.Random) -> tuple[str, str, int]:
    src, dst, factor, what = rng.choice(_UNITS)
    value = Decimal(rng.randint(5, 400)) / (10 if rng.random() < 0.5 else 1)
    exact = value * 9 / 5 + 32 if factor is None else value * Decimal(factor)
    places = 0 if exact == exact.to_integral_value() else rng.choice([1, 2])
    answer = exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    rounding = "Give a whole number." if places == 0 else f"Round to {places} decimal place{'s' * (places > 1)}."
    verb = "is at" if factor is None else "measures"
    return f"{what.capitalize()} {verb} {value} {src}. What is that in {dst}? {rounding}", str(answer), places


_SINGLE = {"arithmetic": _arithmetic, "units": _units}

# -- kb-hops: entity kinds and the relations leaving each (relation -> target kind) --------------
_SCHEMA = {"object": {"owner": "person", "maker": "company"},
           "person": {"manager": "person", "employer": "company", "hometown": "city"},
           "company": {"headquarters": "city", "founder": "person"},
           "city": {"mayor": "person"}}
_WH = {"person": "Who is", "company": "Which company is", "city": "Which city is"}


def _kb(rng: random.Random) -> tuple[dict, str, list[tuple[str, str, str]]]:
    """A knowledge base {entity: {relation: entity}}, its start object, and a 2-4 hop gold chain."""
    people = rng.sample([f"{f} {s}" for f in NAMES for s in SURNAMES], 8)
    kinds = {p: "person" for p in people}
    kinds.update({f"the {c} {t}": "object" for c, t in zip(rng.sample(COLORS, 4), rng.sample(THINGS, 4))})
    kinds.update({f"{f} Corp": "company" for f in rng.sample(FIRMS, 4)})
    kinds.update({c: "city" for c in rng.sample(CITIES, 4)})
    by_kind = {k: [e for e, kk in kinds.items() if kk == k] for k in _SCHEMA}
    facts = {e: {r: rng.choice([x for x in by_kind[t] if x != e]) for r, t in _SCHEMA[k].items()}
             for e, k in kinds.items()}
    start = rng.choice(by_kind["object"])
    hops, chain, here = rng.randint(2, 4), [], start
    for _ in range(hops):
        rel = rng.choice(sorted(_SCHEMA[kinds[here]]))
        chain.append((here, rel, facts[here][rel]))
        here = facts[here][rel]
    return {"facts": facts, "kinds": kinds}, start, chain


def _name(entity: str) -> str:
    return entity[4:] if entity.startswith("the ") else entity  # how an entity is written in actions


class BasicBenchmark(Benchmark):
    name = "basic"
    max_steps = 8  # kb-hops: 4 hops + 4 spare; single-turn tasks end after one step

    def __init__(self, categories: list[str] | None = None):
        for c in categories or []:
            if c not in CATEGORIES:
                raise UnknownNameError("basic category", c, CATEGORIES)
        self.categories = list(categories or CATEGORIES)

    def task(self, category: str, split: str, index: int) -> Task:
        seed = SPLIT_BASE[split] + index
        rng = random.Random(f"basic/{category}/{seed}")  # str seeds hash stably across runs
        tid = f"basic/{category}/{split}/{index}"
        if category in _SINGLE:
            question, answer, places = _SINGLE[category](rng)
            return Task(id=tid, benchmark=self.name, split=split, category=category, seed=seed,
                        prompt=question, gold=answer, meta={"places": places})
        kb, start, chain = _kb(rng)
        answer = chain[-1][2]
        phrase = "the " + " of the ".join(r for _, r, _ in reversed(chain)) + f" of {start}"
        question = f"{_WH[kb['kinds'][answer]]} {phrase}?"
        prompt = (f"Question: {question}\nFind the answer in the knowledge base. Actions: "
                  "'lookup <entity> <relation>' reads one fact; 'answer <entity>' gives your answer.")
        gold = [f"lookup {_name(e)} {r}" for e, r, _ in chain] + [f"answer {answer}"]
        return Task(id=tid, benchmark=self.name, split=split, category=category, seed=seed,
                    prompt=prompt, gold=gold, meta={"answer": answer, "hops": len(chain)})

    def tasks(self, split: str, per_category: int | None = None) -> list[Task]:
        if split not in SPLITS:
            raise BenchmarkError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
        n = DEFAULT_PER_CATEGORY if per_category is None else per_category
        return [self.task(c, split, i) for c in self.categories for i in range(n)]

    def env(self, task: Task) -> Env:
        if task.category in _SINGLE:
            return _SingleTurnEnv(task)
        if task.category == "kb-hops":
            return _KbEnv(task)
        raise UnknownNameError("basic category", task.category, CATEGORIES)


class _SingleTurnEnv(Env):
    def __init__(self, task: Task):
        self.task, self.last = task, None

    def reset(self) -> Observation:
        self.last = Observation(text=self.task.prompt, actions=None)
        return self.last

    def step(self, action: str) -> Observation:
        if self.last is not None and self.last.done:
            return Observation(text="The episode is over.", score=self.last.score, done=True,
                               info=dict(self.last.info))
        got, gold = parse_number(action), Decimal(self.task.gold)
        places = self.task.meta.get("places", 0)
        # Within half a unit of the last stated digit: accepts the rounded and the exact value.
        ok = got is not None and abs(got - gold) <= Decimal(5).scaleb(-places - 1)
        self.last = Observation(text="Correct." if ok else "Incorrect.", score=float(ok), done=True,
                                info={"won": ok, "parsed": None if got is None else str(got)})
        return self.last


class _KbEnv(Env):
    def __init__(self, task: Task):
        self.task = task
        kb, self.start, self.chain = _kb(random.Random(f"basic/{task.category}/{task.seed}"))
        self.facts, self.kinds = kb["facts"], kb["kinds"]
        self.names = {_name(e).lower(): e for e in self.kinds}
        self.gold_facts = {(e, r) for e, r, _ in self.chain}  # a chain may revisit a fact
        self.limit = len(self.chain) + 4

    def reset(self) -> Observation:
        self.seen, self.found, self.steps, self.done = [self.start], set(), 0, False
        return self._obs(self.task.prompt, 0.0)

    def _score(self) -> float:
        return 0.5 * len(self.found) / len(self.gold_facts)

    def _obs(self, text: str, score: float, won: bool = False) -> Observation:
        actions = sorted(f"lookup {_name(e)} {r}" for e in self.seen for r in self.facts[e])
        actions += sorted(f"answer {e}" for e in self.seen if self.kinds[e] != "object")  # never an answer
        self.last = Observation(text=text, actions=[] if self.done else actions, score=score,
                                done=self.done, info={"won": won, "steps": self.steps})
        return self.last

    def step(self, action: str) -> Observation:
        if self.done:
            return self._obs("The episode is over.", self.last.score, self.last.info["won"])
        self.steps += 1
        words = " ".join(str(action).split()).rstrip(".!?")
        verb, _, rest = words.partition(" ")
        score, won = self._score(), False
        if verb.lower() == "lookup" and rest:
            entity_text, _, rel = rest.rpartition(" ")
            entity = self.names.get(entity_text.lower())
            rel = rel.lower()
            if entity is None or rel not in self.facts[entity]:
                text = f"No fact found for {rest!r}."
            else:
                target = self.facts[entity][rel]
                text = f"The {rel} of {entity} is {target}."
                if target not in self.seen:
                    self.seen.append(target)
                if (entity, rel) in self.gold_facts:
                    self.found.add((entity, rel))
                score = self._score()
        elif verb.lower() == "answer" or words.lower() in self.names:
            guess = self.names.get((rest if verb.lower() == "answer" else words).lower())
            won = guess == self.chain[-1][2]
            self.done = True
            text, score = ("Correct." if won else "Incorrect."), (1.0 if won else score)
        else:
            text = "Unknown action. Use 'lookup <entity> <relation>' or 'answer <entity>'."
        if self.steps >= self.limit and not self.done:
            self.done = True
            text += " (step limit reached)"
        return self._obs(text, score, won)
