"""Say where each object goes, and which move comes next, for a task that asks to put objects away in
their usual places (twx's twc).

Reads an episode's transcript on stdin: the task and the first room description, then each action as
``> action`` and what came back. The places are ranked by what the train games taught (``places.json``:
the objects put away there and the furniture of their rooms) through the nearest objects by meaning
(all-MiniLM-L6-v2 embeddings, ``minilm.py``), plus the object's own likeness to each place. The game
says "[Your score has gone down ...]" after a wrong place: that place is struck off, the object is taken
back and the next place tried. Prints the next move first, then the ranked places of the objects held;
nothing when the task is not of this kind or no object is known yet."""
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PHRASE = re.compile(r"(?:you see|There is also|You also see) an? ([A-Za-z][A-Za-z\- ]*?)(,? that [^.]*)?\.")
STEP = re.compile(r"\n> ([^\n]*)\n")
NEIGHBOURS = 3  # train objects that vote; more dilutes the vote with far ones
OWN_LIKENESS = 0.3  # weight of the object's likeness to the place itself, for places no neighbour used


def rooms_of(text: str) -> list[tuple[str, str]]:
    """Every room description in order, as (room, description): the first observation, and what `look
    around` or a move printed."""
    out = []
    for m in re.finditer(r"You are in the ([a-z ]+?)\. ", text):
        out.append((m[1], text[m.start():].split("\n> ", 1)[0]))
    return out


def events(transcript: str) -> list[tuple[str, str]]:
    parts = STEP.split(transcript)
    return list(zip(parts[1::2], parts[2::2]))


def state(transcript: str):
    """(taken in order, placed {object: place}, struck {object: {places}}, held, opened)."""
    taken, placed, struck, held, opened = [], {}, {}, [], set()
    for action, said in events(transcript):
        m = re.match(r"You (take|put) the (.+?)(?: in the (.+?))?\.", said)
        if m and m[1] == "take":
            taken += [m[2]] if m[2] not in taken else []
            held += [m[2]] if m[2] not in held else []
            placed.pop(m[2], None)
        elif m:
            thing, where = m[2], m[3]
            held = [h for h in held if h != thing]
            if "score has gone down" in said:
                struck.setdefault(thing, set()).add(where)
            else:
                placed[thing] = where
        refused = re.match(r"put (.+?) in (.+)$", action)
        if refused and said.startswith("Unknown action"):  # not a place things go in (a bath mat)
            struck.setdefault(refused[1], set()).add(refused[2])
        o = re.match(r"You open the (.+?)\.", said)
        if o:
            opened.add(o[1])
    return taken, placed, struck, held, opened


class Places:
    """The train games' places, and the embedding model loaded only when an object must be ranked: a
    step with nothing in hand (most of them) needs neither numpy nor the model."""

    def __init__(self):
        table = json.loads((HERE.parent / "places.json").read_text())
        self.furniture = set(table["furniture"])
        self.places = [p for _, p in table["places"]]
        self._model, self._vecs = False, {}

    def _load(self):
        if self._model is False:
            import numpy as np
            from minilm import MiniLM, model_dir
            self.np = np
            self.vectors = np.load(HERE.parent / "places.npy").astype(np.float32) / 127.0  # stored as int8
            folder = model_dir()
            self._model = MiniLM(folder) if folder else None
        return self._model

    def _encode(self, texts: list[str]):
        """Unit vectors of ``texts``, each text embedded once per run of the script."""
        new = [t for t in dict.fromkeys(texts) if t not in self._vecs]
        if new:
            self._vecs.update(zip(new, self._model.encode(new)))
        return [self._vecs[t] for t in texts]

    def rank(self, thing: str, options: list[str]) -> list[str]:
        if not options:
            return []
        if self._load() is None:  # no embedding model: furniture the train games used most, first
            return sorted(options, key=lambda o: -self.places.count(o))
        vecs = self._encode([f"a {thing}"] + [f"in the {o}" for o in options])
        sims = self.vectors @ vecs[0]
        score = {o: OWN_LIKENESS * float(vecs[i + 1] @ vecs[0]) for i, o in enumerate(options)}
        for j in self.np.argsort(-sims)[:NEIGHBOURS]:
            if self.places[j] in score:
                score[self.places[j]] += max(0.0, float(sims[j]))
        return sorted(options, key=lambda o: -score[o])


def phrases_of(description: str) -> list[tuple[str, str]]:
    """(name, clause) of what a description says is here; doors are ways out, not places."""
    return [(n, c) for n, c in PHRASE.findall(description) if "door" not in n]


def exits(description: str) -> dict[str, str]:
    """{room: move} of the ways out a description names: "To the West you see the corridor." gives
    {"corridor": "move west"}; a closed door hides its room: {"door west": "open door to west"}."""
    out = {}
    for way, room in re.findall(r"[Tt]o the (\w+) you see (?:the|a|an) ([a-z -]+?)\.", description):
        if room.endswith("door"):
            out[f"door {way.lower()}"] = f"open door to {way.lower()}"
        else:
            out[room] = f"move {way.lower()}"
    return out


def advise(transcript: str) -> str:
    rooms = rooms_of(transcript)
    if not rooms:
        return ""
    places = Places()
    taken, placed, struck, held, opened = state(transcript)
    seen = {}  # room -> its furniture, as last described
    for room, description in rooms:
        seen[room] = [n for n, c in phrases_of(description) if c or n in places.furniture]
    here, description = rooms[-1]
    phrases = phrases_of(description)
    # The objects lie after the furniture in a description; furniture is what the train rooms held.
    last_fixed = max([i for i, (name, clause) in enumerate(phrases) if clause or name in places.furniture], default=-1)
    loose = [name for name, _ in phrases[last_fixed + 1:] if name not in places.furniture]
    fixed = [name for name, _ in phrases if name not in loose]
    closed = {name for name, clause in phrases if "closed" in clause} - opened
    ways = exits(description)
    for action, said in events(transcript):  # a door opened since the description: its room is known
        door, room = re.match(r"open door to (\w+)", action), re.search(r"revealing the ([a-z ]+?)\.", said)
        if door and room and ways.pop(f"door {door[1]}", None):
            ways[room[1]] = f"move {door[1]}"
    unvisited = [r for r in ways if r not in seen]
    step, ranked = "", []
    for thing in held:
        options = [p for p in places.rank(thing, fixed) if p not in struck.get(thing, ())]
        ranked.append(f"{thing}: {', '.join(options[:3])}")
    todo = [t for t in loose if t not in held and t not in placed]
    if todo:
        step = f"take {todo[0]}."
    for thing in ([] if todo else held):
        known = {p for r in seen.values() for p in r} | places.furniture
        best = places.rank(thing, [p for p in known if p not in struck.get(thing, ())])[:1]
        if not best:
            continue
        if best[0] in fixed:
            step = f"open {best[0]}." if best[0] in closed else f"put {thing} in {best[0]}."
            break
        there = [r for r, f in seen.items() if best[0] in f and r in ways]
        if there or unvisited:  # its place is, or may be, in another room
            step = f"{ways[(there or unvisited)[0]]}."
            break
        where = [p for p in places.rank(thing, fixed) if p not in struck.get(thing, ())][:1]
        if where:  # nowhere else to look: the likeliest place here
            step = f"open {where[0]}." if where[0] in closed else f"put {thing} in {where[0]}."
            break
    if not step and not todo and not held and unvisited:  # nothing to do here: objects may be elsewhere
        step = f"{ways[unvisited[0]]}."
    elif not step and not todo and not held and taken and all(t in placed for t in taken):
        step = "every object is in its place."
    if not step:
        return ""
    return f"Next: {step}" + (f" Usual places: {'; '.join(ranked)}." if ranked else "")


if __name__ == "__main__":
    text = sys.stdin.read()
    if re.search(r"usual locations", text.split("\n> ", 1)[0]):
        print(advise(text))
