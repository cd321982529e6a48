"""Order the objects of a room from the smallest quantity to the largest, and say which to move next.

Reads an episode's transcript on stdin: the task and the first room description, then each action as
``> action`` and what came back. Quantities such as "21kg of marble", "47g of brick", "12ml of oak",
"4m of acrylic" or "10 peaches" are converted to a common scale per kind (mg/g/kg, ml/l, mm/cm/m).
Prints the next move (take the smallest object not yet in the box, or put the one held into it), the
order and what is already placed; nothing when fewer than two objects are found."""
import re
import sys

SCALE = {"mg": 0.001, "g": 1.0, "kg": 1000.0, "ml": 1.0, "l": 1000.0, "mm": 0.001, "cm": 0.01, "m": 1.0, "": 1.0}
ITEM = re.compile(r"\b(\d+(?:\.\d+)?)\s?(mg|kg|g|ml|l|mm|cm|m)?\s+(?:of\s+)?([a-z][a-z ]*?)(?=,|\.| and\b| on\b| in\b|$)", re.I)
CONTAINER = "box"


def objects(text: str) -> list[tuple[float, str]]:
    seen, out = set(), []
    for m in ITEM.finditer(text):
        number, unit, name = m.group(1), (m.group(2) or "").lower(), m.group(3).strip()
        label = f"{number}{unit} of {name}" if unit else f"{number} {name}"
        if name and label not in seen:
            seen.add(label)
            out.append((float(number) * SCALE[unit], label))
    return out


def placed_and_held(transcript: str) -> tuple[list[str], set[str]]:
    """What the game confirmed: objects put in the container, and those taken and not put down since."""
    placed, held = [], set()
    for m in re.finditer(r"You (take|put) the (.+?)(?: in the (\w+))?\.", transcript):
        verb, label, where = m.groups()
        if verb == "take":
            held.add(label)
        else:
            held.discard(label)
            if where == CONTAINER and label not in placed:
                placed.append(label)
    return placed, held


if __name__ == "__main__":
    transcript = sys.stdin.read()
    room = transcript.split("\n> ", 1)[0]  # the task and the first description: where the objects are
    order = [label for _, label in sorted(objects(room), key=lambda x: x[0])]
    if len(order) >= 2:
        placed, held = placed_and_held(transcript)
        left = [label for label in order if label not in placed]
        if not left:
            step = "every object is in the box."
        elif left[0] in held:
            step = f"put {left[0]} in {CONTAINER}."
        else:
            step = f"take {left[0]}."
        done = f" In the box: {', '.join(placed)}." if placed else ""
        print(f"Next: {step} From smallest to largest: {', '.join(order)}.{done}")
