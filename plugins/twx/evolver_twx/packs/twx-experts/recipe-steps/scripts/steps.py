"""Follow a cookbook recipe in twx's cookingworld, and say which command to type next.

Reads an episode's transcript on stdin: the task and the first room description, then each action as
``> action`` and what came back. Before the recipe is read it says "take cookbook" / "read cookbook";
then it tracks, from the game's own replies, where the knife and each ingredient were seen (on a
counter, in a fridge or cupboard, in another room), what is held, cut and cooked, and prints the next
command exactly as the game accepts it (``cook pork chop in toaster``), then the recipe's remaining
commands. Nothing is printed when the task is not a cookbook one."""
import re
import sys

CUTS = ("slice", "dice", "chop")  # need the knife held
HEAT = {"grill": ("toaster", "barbeque"), "fry": ("stove",), "roast": ("oven",)}  # verb -> appliances
# Where to look first: the knife lives in the cutlery drawer or cupboard, ingredients in the fridge.
OPEN_ORDER = ("cutlery drawer", "fridge", "kitchen cupboard", "dishwasher", "trash can")
BACK = {"north": "south", "south": "north", "east": "west", "west": "east"}


def parse(transcript):
    """The recipe and the world as the game described it: rooms, doors, sightings, held, done."""
    chunks = transcript.split("\n> ")
    m = re.search(r"Ingredients:\n(.*?)\n\s*\nDirections:\n(.*?)(?:\n\s*\n|$)", transcript, re.S)
    s = {"items": [i.strip() for i in m.group(1).strip().splitlines()] if m else [],
         "steps": [d.strip() for d in m.group(2).strip().splitlines()] if m else [],
         "room": "kitchen", "graph": {}, "doors": {}, "closed": {}, "seen": {}, "held": set(),
         "done": set(), "visited": set(), "meal": False}
    names = s["items"] + ["knife", "cookbook", "toaster", "barbeque", "stove", "oven"]
    for n, chunk in enumerate(chunks):
        action, _, text = chunk.partition("\n") if n else ("", "", chunk)
        prev, here = s["room"], re.search(r"You are in the ([a-z ]+)\.", text)
        if here:  # a room description: what lies in the open here, closed containers, exits
            s["room"] = room = here.group(1)
            s["visited"].add(room)
            if action.startswith("move ") and room != prev:
                d = action.split()[1]
                s["graph"].setdefault(prev, {})[d] = room
                s["graph"].setdefault(room, {})[BACK.get(d, d)] = prev
            s["closed"][room] = {c: True for c in re.findall(r"(?:a|an) ([a-z ]+?) that is closed", text)}
            for name in [n for n in names if re.search(rf"\b{n}\b", text)]:  # in the open: on a counter...
                s["seen"][name] = (room, None)
            for d in re.findall(r"To the (\w+) you see a closed", text):
                s["doors"][(room, d.lower())] = "closed"
            for d, other in re.findall(r"[Tt]o the (\w+) you see the ([a-z ]+)\.", text):
                s["graph"].setdefault(room, {})[d.lower()] = other
                s["doors"][(room, d.lower())] = "open"
        room = s["room"]
        if m := re.match(r"You open the ([a-z -]+?)[.,](.*)", text, re.S):
            what = m.group(1)
            if action.startswith("open door to "):
                d = action.split()[-1]
                s["doors"][(room, d)] = "open"
                if r := re.search(r"revealing the ([a-z ]+)\.", text):
                    s["graph"].setdefault(room, {})[d] = r.group(1)
            else:
                s["closed"].setdefault(room, {})[what] = False
                for name in [n for n in names if re.search(rf"\b{n}\b", m.group(2))]:
                    s["seen"][name] = (room, what)
        elif m := re.match(r"You close the ([a-z -]+?)\.", text):
            if action.startswith("close door to "):
                s["doors"][(room, action.split()[-1])] = "closed"
            else:
                s["closed"].setdefault(room, {})[m.group(1)] = True
        for m in re.finditer(r"You take the ([a-z ]+?)\.", text):
            s["held"].add(m.group(1))
        for m in re.finditer(r"You put the ([a-z ]+?) (?:in|on) the ([a-z ]+?)\.", text):
            s["held"].discard(m.group(1))
            s["seen"][m.group(1)] = (room, m.group(2))
        for m in re.finditer(r"You (slice|dice|chop|grill|fry|roast) the ([a-z ]+?)(?: with the|\.)", text):
            s["done"].add(f"{m.group(1)} the {m.group(2)}")
        s["meal"] = s["meal"] or "Adding the meal to your inventory" in text
    return s


def go(s, target):
    """The first move towards a known room (opening a closed door first), or None."""
    paths, todo = {s["room"]: None}, [s["room"]]
    for room in todo:
        for d, other in s["graph"].get(room, {}).items():
            if other not in paths:
                paths[other] = paths[room] or d
                todo.append(other)
    d = paths.get(target)
    if d is None:
        return None
    return f"open door to {d}" if s["doors"].get((s["room"], d)) == "closed" else f"move {d}"


def explore(s):
    """Open an unexplored door here, or walk to a room not yet visited; None when none is left."""
    for (room, d), state in s["doors"].items():
        if room == s["room"] and state == "closed" and d not in s["graph"].get(room, {}):
            return f"open door to {d}"
    for other in {o for exits in s["graph"].values() for o in exits.values()} - s["visited"]:
        if step := go(s, other):
            return step
    return None


def reach(s, name, place, look_inside=True):
    """The move that brings ``name`` (an item or appliance) within reach, given where it was seen."""
    if place is None:  # never seen: open containers here (not for an appliance), then explore the house
        shut = [c for c, closed in s["closed"].get(s["room"], {}).items() if closed and look_inside]
        unopened = [c for c in OPEN_ORDER if c in shut]
        return f"open {unopened[0]}" if unopened else explore(s) or f"find the {name} (look in other rooms)"
    room, container = place
    if room != s["room"]:
        return go(s, room) or f"find the {name} (look in other rooms)"
    return f"open {container}" if container and s["closed"].get(room, {}).get(container) else None


def next_move(s):
    if not s["steps"]:  # the recipe is not known yet
        if "cookbook" in s["held"] or s["seen"].get("cookbook", ("",))[0] == s["room"]:
            return "read cookbook" if "cookbook" in s["held"] else "take cookbook"
        return go(s, "kitchen") or "find the cookbook (look in other rooms)"
    left = [d for d in s["steps"] if d != "prepare meal" and d not in s["done"]]
    needed = [i for i in s["items"] if i not in s["held"]]
    if any(d.split()[0] in CUTS for d in left) and "knife" not in s["held"]:
        needed.insert(0, "knife")
    for name in needed:  # first what can be taken here, then what needs opening or walking to
        if name in s["seen"] and not reach(s, name, s["seen"][name]):
            return f"take {name}"
    if needed:
        return reach(s, needed[0], s["seen"].get(needed[0]))
    for d in sorted(left, key=lambda d: d.split()[0] not in CUTS):  # cut everything, then cook
        verb, food = d.split(" the ", 1)
        if verb in CUTS:
            return f"{verb} {food}"
        spots = [a for a in HEAT[verb] if a in s["seen"]]
        here = [a for a in spots if s["seen"][a][0] == s["room"]]
        return f"cook {food} in {here[0]}" if here else reach(s, spots[0], s["seen"][spots[0]]) if spots \
            else reach(s, " or ".join(HEAT[verb]), None, look_inside=False)
    if not s["meal"]:
        return go(s, "kitchen") if s["room"] != "kitchen" else "prepare meal"
    return "eat meal"


def command(s, direction):
    """A recipe direction as the command that carries it out ("grill the X" -> "cook X in toaster")."""
    verb, _, food = direction.partition(" the ")
    spots = [a for a in HEAT.get(verb, ()) if a in s["seen"]]
    return f"{verb} {food}" if verb in CUTS else f"cook {food} in {spots[0]}" if spots else direction


if __name__ == "__main__":
    transcript = sys.stdin.read()
    if "cookbook" in transcript.split("\n\n", 1)[0]:  # the task text names the cookbook
        s = parse(transcript)
        step = next_move(s)
        todo = [command(s, d) for d in s["steps"] if d not in s["done"] and not (d == "prepare meal" and s["meal"])]
        recipe = f" Recipe left: {', '.join(todo + ['eat meal'])}." if s["steps"] else ""
        print(f"Next: {step}.{recipe}")
