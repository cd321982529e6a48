"""Answer arithmetic stated in words, read from stdin: "add 13 and 11", "subtract 3 from 39",
"multiply 7 and 5", "divide 36 by 6". Prints "<problem> = <answer>" per problem found; nothing if none."""
import re
import sys

OPS = {
    "add": (r"add (-?\d+) (?:and|to) (-?\d+)", lambda a, b: a + b),
    "subtract": (r"subtract (-?\d+) from (-?\d+)", lambda a, b: b - a),
    "multiply": (r"multiply (-?\d+) (?:and|by) (-?\d+)", lambda a, b: a * b),
    "divide": (r"divide (-?\d+) by (-?\d+)", lambda a, b: a / b if b else None),
}


def answers(text: str) -> list[str]:
    out = []
    for pattern, op in OPS.values():
        for m in re.finditer(pattern, text, re.I):
            value = op(int(m.group(1)), int(m.group(2)))
            if value is None:
                continue
            value = int(value) if float(value).is_integer() else round(value, 4)
            out.append(f"{m.group(0)} = {value}")
    return out


if __name__ == "__main__":
    found = answers(sys.stdin.read())
    if found:
        print("; ".join(found) + f". The answer is {found[-1].rsplit('= ', 1)[1]}.")
