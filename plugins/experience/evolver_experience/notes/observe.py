"""Name the next move from mined experience: the steps of earlier episodes whose state is nearest to
this one, the actions taken there, and whether they raised or lowered the score.

Written by evolver's skill miner (``evolver_experience.mining``) into a skill folder beside
``cases.json.gz``; it knows nothing of any benchmark. Reads the episode so far on stdin (the task, then
each action as ``> action`` and what came back) and, with ``--actions JSON``, the valid actions of this
step. A state is four texts: the task (its first words), the latest observation, the last action and
the episode's memory (the words its earlier observations held that its opening did not: the recipe read
three moves ago); each is a bag of words compared by cosine, and their weighted sum finds the nearest cases. Every valid
action then scores the sum over those cases of (weight x value x how alike the two actions are), a
case's weight falling sharply with its distance from the nearest one's similarity,
where a case's value is +1 when its action raised the score, -1 when it lowered it, and up to +0.5
when it was a step of an episode that was won (``evolver_experience.mining`` says how much); two actions are alike when their words are the same or copy the
same part of their own states (:func:`codes`, which also reads the episode's earlier observations),
so what was learnt on one object carries to another. Where no valid actions are listed and the best action is a
tool call (a JSON object), its argument values are re-taken from this episode (:func:`refilled`). Prints
"Next: ACTION." for the best positive action and
"Avoid: ..." for the negative ones; nothing when no case is near enough. Standard library only, so one
call costs milliseconds.
"""
import gzip
import json
import math
import re
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "cases.json.gz"
WORD = re.compile(r"[a-z0-9]+")
TASK_WORDS = 60  # the task's first words: the instructions, before any room or inventory it lists
TEXT_CHARS = 400  # an observation's share of a state
WEIGHTS = (0.25, 0.45, 0.30, 0.5)  # task, observation, last action, what the episode has read (memory)
MEMORY_WORDS = 80  # the words of a state's memory (:func:`memory`), at most
MIN_SIMILARITY = 0.5  # a state less alike than this is no evidence
NEIGHBOURS = 12
# A neighbour's vote falls by e^-SHARPNESS per unit of similarity below the nearest one's: one state
# that matches exactly outvotes a dozen that share only the task's words.
SHARPNESS = 20.0
# Where an action's words come from (:func:`codes`): the latest observation, the last action, the task,
# an earlier observation. The task and the earlier observations hold more words than a move uses.
SOURCE_WEIGHT = {"o": 1.0, "p": 1.0, "t": 0.5, "e": 1.0}
# A number in an action may be computed from numbers the latest observation shows ("17" after "add 9
# and 8"): each way of getting it from two of that observation's first DERIVE_FROM numbers by + - * /
# is one more code letter of the word (:func:`derived`). Two actions whose numbers are got the same way
# are the same move, however the numbers differ; a number got no way the case's was is another move.
DERIVE_FROM = 4
DERIVED_WEIGHT = 2.0
OPS = ("+", "-", "*", "/")
NUMBER = re.compile(r"\d+")
NUMBER_WEIGHT = 0.5  # a number's own count in a state's bag, beside the "#" every number counts as
# Between moves that are equally alike to the cases, the one with more of a case's own words goes
# first: a tie breaker, never more ("put {o} in box" over "put {o} in bench" when both rooms' lists name them).
EXACT_BONUS = 1e-3
MIN_ACTION_MATCH = 0.75  # two actions this alike (word cosine) share their evidence, scaled by the match


def bag(text: str) -> dict:
    """Word counts; every number counts as the one word "#", and as itself at :data:`NUMBER_WEIGHT`:
    states that differ only in their numbers are the same kind of state (the numbers' part in a move is
    :func:`derived`'s), and those whose numbers agree too are nearer (a state told in numbers alone,
    a hand of cards say, is otherwise one state)."""
    out: dict = {}
    for w in WORD.findall(text.lower()):
        if w.isdigit():
            out["#"] = out.get("#", 0) + 1
            w, n = "#" + str(int(w)), NUMBER_WEIGHT
        else:
            n = 1
        out[w] = out.get(w, 0) + n
    return out


def cosine(a: dict, b: dict, na: float, nb: float) -> float:
    if not na or not nb:
        return 1.0 if not na and not nb else 0.0  # two empty texts (the first step) are the same state
    if len(a) > len(b):
        a, b = b, a
    return sum(v * b.get(k, 0) for k, v in a.items()) / (na * nb)


def norm(b: dict) -> float:
    return math.sqrt(sum(v * v for v in b.values()))


def task_text(text: str) -> str:
    return " ".join(WORD.findall(text.lower())[:TASK_WORDS])


def parse(transcript: str) -> tuple:
    """(task, last observation, last action, earlier observations) of a transcript; the task is its
    whole opening text."""
    parts = transcript.split("\n> ")
    if len(parts) == 1:
        return parts[0], "", "", ""
    action, _, said = parts[-1].partition("\n")
    earlier = " ".join(p.partition("\n")[2] for p in parts[1:-1])
    return parts[0], said[:TEXT_CHARS], action.strip(), earlier


def memory(task: str, earlier: str) -> str:
    """What the episode has read that its opening did not say: the distinct words of its earlier
    observations that the task's text lacks (a recipe read three moves ago, what a container held),
    in the order first seen. Two states with the same latest observation differ by what came before."""
    known = set(WORD.findall(task.lower()))
    out: dict = {}
    for w in WORD.findall(earlier.lower()):
        if w not in known and not w.isdigit() and len(out) < MEMORY_WORDS:
            out.setdefault(w, None)
    return " ".join(out)


def load(path: Path = DATA) -> dict:
    with gzip.open(path, "rt") as fh:
        return loaded(json.load(fh))


def loaded(data: dict) -> dict:
    """The cases file's data with each text's bag of words and its norm, ready for :func:`note`."""
    texts = [bag(t) for t in data["texts"]]
    data["bags"] = texts
    data["norms"] = [norm(b) for b in texts]
    return data


def neighbours(data: dict, state: tuple) -> list:
    """[(similarity, case)] of the nearest cases, best first."""
    qs = [bag(task_text(state[0])), bag(state[1]), bag(state[2]),
          bag(memory(state[0], state[3] if len(state) > 3 else ""))]
    qn = [norm(b) for b in qs]
    w_mem = WEIGHTS[3]
    bags, norms = data["bags"], data["norms"]
    memo: dict = {}

    def sim(part: int, i: int) -> float:
        key = (part, i)
        if key not in memo:
            memo[key] = cosine(qs[part], bags[i], qn[part], norms[i])
        return memo[key]

    scored = []
    for case in data["cases"]:
        task, obs, prev = case[0], case[1], case[2]
        s = WEIGHTS[0] * sim(0, task) + WEIGHTS[1] * sim(1, obs) + WEIGHTS[2] * sim(2, prev)
        if w_mem and len(case) > 6:
            s = (s + w_mem * sim(3, case[6])) / (1.0 + w_mem)
        if s >= MIN_SIMILARITY:
            scored.append((s, case))
    scored.sort(key=lambda x: -x[0])
    return scored[:NEIGHBOURS]


def codes(action: str, state: tuple) -> str:
    """Where each word of ``action`` comes from in its state, one token a word: the letters of the parts
    that hold it (``o`` the latest observation, ``p`` the last action, ``t`` the task, ``e`` an earlier
    observation: the recipe read three moves ago), ``-`` none.
    Two actions whose words differ only where both copy the same part of their own state ("take papaya"
    after "...take the papaya." and "take peach" after "...take the peach.") are the same move, so a
    case teaches states with other objects in them."""
    parts = (state[1], state[2], state[0], state[3] if len(state) > 3 else "")
    sources = [set(WORD.findall(part.lower())) for part in parts]
    numbers = [int(n) for n in NUMBER.findall(state[1])[:DERIVE_FROM]]
    out = []
    for w in action.lower().split():
        w = "".join(WORD.findall(w))
        code = "".join(c for c, words in zip("opte", sources) if w in words)
        if w.isdigit() and len(numbers) > 1:
            code += derived(int(w), numbers)
        out.append(code or "-")
    return " ".join(out)


def derived(n: int, numbers: list) -> str:
    """One letter for each (operation, i, j) with ``numbers[i] op numbers[j] == n`` (i != j; a division
    only when exact), in a fixed order: the letters are private-use characters, so they never clash
    with the source letters of :func:`codes`."""
    out = []
    for k, op in enumerate(OPS):
        for i, a in enumerate(numbers):
            for j, b in enumerate(numbers):
                if i == j:
                    continue
                got = a + b if op == "+" else a - b if op == "-" else a * b if op == "*" else \
                    (a // b if b and a % b == 0 else None)
                if got == n:
                    out.append(chr(0xE000 + (k * DERIVE_FROM + i) * DERIVE_FROM + j))
    return "".join(out)


def template(action: str, action_codes: str) -> list:
    """The action as a move: its own words, with each run of words copied from the latest observation
    or the last action folded into one slot ("take clean brown shirt" after "You see a clean brown
    shirt.": ["take", "{o}"]). A word only the task or an earlier observation holds stays itself: they
    list every container in the room, and which one the move named is what it teaches ("put {o} in
    wardrobe", not "put {o} in {t}")."""
    out: list = []
    for w, c in zip(action.lower().split(), action_codes.split()):
        slot = "{%s}" % c[0] if c.strip("te-") else w  # a derived number is a slot too
        if c == "-" or not out or out[-1] != slot:
            out.append(slot)
    return out


def alike(a: str, a_codes: str, b: str, b_codes: str) -> float:
    """How alike two actions are as moves. Of one length: the mean agreement of their words: the same
    word copied from the same parts agrees, the same word from other parts half ("open red door"
    copying the sign is half the move "open red door" that repeats the last action), two words by the
    parts of their states both copy. Of different lengths: the share of their templates' positions
    that agree, else their templates' cosine."""
    wa, wb, ca, cb = a.lower().split(), b.lower().split(), a_codes.split(), b_codes.split()
    if len(wa) == len(wb) == len(ca) == len(cb):
        same = 0.0
        for x, y, sx, sy in zip(wa, wb, ca, cb):
            if not _same_derivation(sx, sy):
                continue  # b's number was computed from its state, and a's is not computed that way
            if x == y:
                same += 1.0 if sx == sy else 0.5
            elif sx != "-" and sy != "-":
                # the parts both copy over the parts either copies, at least one part's worth: two
                # words that only the task holds (any object a room lists) are half the same move
                shared = sum(SOURCE_WEIGHT.get(c, DERIVED_WEIGHT) for c in set(sx) & set(sy))
                same += shared / max(1.0, sum(SOURCE_WEIGHT.get(c, DERIVED_WEIGHT) for c in set(sx) | set(sy)))
        return same / max(1, len(wa))
    ta, tb = template(a, a_codes), template(b, b_codes)
    if len(ta) == len(tb):
        return sum(x == y for x, y in zip(ta, tb)) / max(1, len(ta))
    ba, bb = bag(" ".join(ta)), bag(" ".join(tb))
    return cosine(ba, bb, norm(ba), norm(bb))


def literal(a: str, b: str) -> float:
    """The share of two actions' word positions that hold the same word (0 for other lengths)."""
    wa, wb = a.lower().split(), b.lower().split()
    return sum(x == y for x, y in zip(wa, wb)) / len(wa) if wa and len(wa) == len(wb) else 0.0


def _same_derivation(sx: str, sy: str) -> bool:
    """Whether a word coded ``sx`` can stand for one coded ``sy``: when ``sy`` was computed (a letter of
    :func:`derived`), ``sx`` must be computed one of the same ways; the same number got by chance is
    another move."""
    got = {c for c in sy if c not in SOURCE_WEIGHT and c != "-"}
    return not got or bool(got & set(sx))


def rank(data: dict, near: list, state: tuple, actions: list | None) -> list:
    """[(score, action)] best first: the valid actions when given, else the cases' own actions."""
    texts = data["texts"]
    top = near[0][0] if near else 0.0
    near = [(math.exp((s - top) * SHARPNESS), case) for s, case in near]
    if not actions:
        evidence: dict = {}
        for s, case in near:
            evidence[texts[case[3]]] = evidence.get(texts[case[3]], 0.0) + s * case[4]
        return sorted(((v, a) for a, v in evidence.items()), key=lambda x: -x[0])
    out = []
    for a in actions:
        mine = codes(a, state)
        total = 0.0
        for s, case in near:
            match = alike(a, mine, texts[case[3]], case[5])
            if match >= MIN_ACTION_MATCH:
                total += s * case[4] * (match * match + EXACT_BONUS * literal(a, texts[case[3]]))
        out.append((total, a))
    return sorted(out, key=lambda x: -x[0])


def refilled(action: str, data: dict, near: list, state: tuple, transcript: str) -> str:
    """A tool call a case made (an action that is a JSON object, where no valid actions are listed), its
    argument values taken from this episode where the case took them from its own: a value the episode
    already shows stays; one that followed some words in the case's observation (``recipient: ``) or task
    (``pay the bill``) becomes what follows the same words here, up to the same delimiter or as many
    words. A value found no such way stays as the case had it (a harness can tell: it is not in the
    episode). Not a call: the action as it is."""
    try:
        call = json.loads(action)
    except ValueError:
        return action
    if not isinstance(call, dict) or not isinstance(call.get("arguments"), dict):
        return action
    texts = data["texts"]
    case = next(c for _, c in near if texts[c[3]] == action)
    seen = transcript.lower()
    latest = transcript.rsplit("\n> ", 1)[1].partition("\n")[2] if "\n> " in transcript else ""  # uncut

    def fill(v):
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fill(x) for x in v]
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            return v
        text = str(v)
        if not text.strip() or text.lower() in seen:
            return v
        got = after_same_words(text, texts[case[1]], latest) or words_after_same(text, texts[case[0]], state[0])
        if got is None or isinstance(v, str):
            return got or v
        try:  # a number stays a number
            return type(v)(got)
        except ValueError:
            return v
    call["arguments"] = fill(call["arguments"])
    return json.dumps(call, ensure_ascii=False)


CONTEXT_CHARS = 24  # the text before a value that says what it is ("recipient: ", "IBAN ")


def after_same_words(value: str, old: str, new: str) -> str | None:
    """What follows, in ``new``, the words that preceded ``value`` in ``old``, up to the character that
    followed it there."""
    at = old.lower().find(value.lower())
    if at < 1:
        return None
    line = old[:at].rsplit("\n", 1)[-1]  # what says what the value is sits before it on its line
    head = line[-CONTEXT_CHARS:]
    head = (head if len(line) <= CONTEXT_CHARS else head[head.find(" ") + 1:]).lstrip()  # from a word's start
    stop = old[at + len(value):at + len(value) + 1] or "\n"
    if not head.strip():
        return None
    # the k-th record's value from the k-th record: a list repeats its keys ("- amount: ... recipient: ...")
    nth, where = old[:at].lower().count(head.lower()), -1  # (the count includes the value's own line)
    for _ in range(max(1, nth)):
        where = new.lower().find(head.lower(), where + 1)
        if where < 0:
            return None
    got = new[where + len(head):].split(stop, 1)[0].strip()
    return got or None


def words_after_same(value: str, old_task: str, new_task: str) -> str | None:
    """For a value the case's task held (its first words, lower case): the as many words of this task that
    follow the same two words, as this task writes them."""
    vw, ow = WORD.findall(value.lower()), WORD.findall(old_task.lower())
    n = len(vw)
    at = next((i for i in range(2, len(ow) - n + 1) if ow[i:i + n] == vw), None)
    if not n or at is None:
        return None
    spans = [(m.group(), m.start(), m.end()) for m in WORD.finditer(new_task.lower())]
    for i in range(len(spans) - n - 1):
        if [spans[i][0], spans[i + 1][0]] == ow[at - 2:at]:
            first, last = spans[i + 2], spans[min(len(spans) - 1, i + 1 + n)]
            return new_task[first[1]:last[2]]
    return None


def note(transcript: str, actions: list | None, data: dict) -> str:
    state = parse(transcript)
    near = neighbours(data, state)
    if not near:
        return ""
    ranked = rank(data, near, state, actions)
    good = [a for v, a in ranked if v > 0]
    if good and not actions and good[0].lstrip().startswith("{"):
        good[0] = refilled(good[0], data, near, state, transcript)
    bad = [a for v, a in ranked if v < 0]
    lines = []
    if good:
        lines.append(f"Next: {good[0]}.")
    if bad:
        lines.append("Avoid: " + "; ".join(bad[-3:][::-1]) + ".")
    return "\n".join(lines)


def main(argv: list) -> int:
    actions = None
    if "--actions" in argv:
        i = argv.index("--actions")
        try:
            actions = [str(a) for a in json.loads(argv[i + 1])]
        except (IndexError, ValueError, TypeError):
            actions = None
    if not DATA.is_file():
        return 0
    out = note(sys.stdin.read(), actions, load())
    if out:
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
