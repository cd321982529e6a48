"""List the objects of a room description from the smallest quantity to the largest, read from stdin:
"21kg of marble", "47g of brick", "12ml of oak", "43l of wood", "4m of acrylic", "10 peaches". Units of
one kind are converted to a common scale (mg/g/kg, ml/l, mm/cm/m). Prints nothing when fewer than two
objects are found."""
import re
import sys

SCALE = {"mg": 0.001, "g": 1.0, "kg": 1000.0, "ml": 1.0, "l": 1000.0, "mm": 0.001, "cm": 0.01, "m": 1.0, "": 1.0}
ITEM = re.compile(r"\b(\d+(?:\.\d+)?)\s?(mg|kg|g|ml|l|mm|cm|m)?\s+(?:of\s+)?([a-z][a-z ]*?)(?=,|\.| and\b| on\b| in\b|$)", re.I)


def objects(text: str) -> list[tuple[float, str]]:
    seen, out = set(), []
    for m in ITEM.finditer(text):
        number, unit, name = m.group(1), (m.group(2) or "").lower(), m.group(3).strip()
        label = f"{number}{unit} of {name}" if unit else f"{number} {name}"
        if name and label not in seen:
            seen.add(label)
            out.append((float(number) * SCALE[unit], label))
    return out


if __name__ == "__main__":
    found = sorted(objects(sys.stdin.read()), key=lambda x: x[0])
    if len(found) >= 2:
        print("From smallest to largest: " + ", ".join(label for _, label in found) + ".")
