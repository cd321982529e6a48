"""Answer arithmetic stated in words and name the object that carries the answer.

Reads an episode's transcript on stdin (the task and room, then each action as ``> action`` and what
came back). Finds problems such as "add 13 and 11", "subtract 3 from 39", "multiply 7 and 5",
"divide 36 by 6", and prints "<problem> = <answer>". When an object in the room is counted as the
answer ("12 apples"), it also prints the next move: take that object, or put it in the box once
held. Prints nothing when no problem has been stated."""
import re
import sys

OPS = {
    "add": (r"add (-?\d+) (?:and|to) (-?\d+)", lambda a, b: a + b),
    "subtract": (r"subtract (-?\d+) from (-?\d+)", lambda a, b: b - a),
    "multiply": (r"multiply (-?\d+) (?:and|by) (-?\d+)", lambda a, b: a * b),
    "divide": (r"divide (-?\d+) by (-?\d+)", lambda a, b: a / b if b else None),
}
COUNTED = re.compile(r"\b(\d+) ([a-z][a-z ]*?)(?=,|\.| and\b| on\b| in\b|$)", re.I)
CONTAINER = "box"


def answers(text: str) -> list[tuple[str, float]]:
    out = []
    for pattern, op in OPS.values():
        for m in re.finditer(pattern, text, re.I):
            value = op(int(m.group(1)), int(m.group(2)))
            if value is not None and m.group(0) not in [p for p, _ in out]:  # a problem read twice
                out.append((m.group(0), int(value) if float(value).is_integer() else round(value, 4)))
    return out


def next_move(transcript: str, answer) -> str:
    room = transcript.split("\n> ", 1)[0]
    matches = [f"{n} {name.strip()}" for n, name in COUNTED.findall(room) if str(n) == str(answer)]
    if not matches:
        return ""
    item = matches[0]
    if f"You put the {item} in the {CONTAINER}" in transcript:
        return f" {item} is in the {CONTAINER}."
    taken = transcript.rfind(f"You take the {item}.")
    dropped = transcript.rfind(f"You put the {item}")
    verb = f"put {item} in {CONTAINER}" if taken > dropped else f"take {item}"
    return f" Next: {verb}."


if __name__ == "__main__":
    transcript = sys.stdin.read()
    found = answers(transcript)
    if found:
        problems = "; ".join(f"{p} = {v}" for p, v in found)
        answer = found[-1][1]
        print(f"{problems}. The answer is {answer}.{next_move(transcript, answer)}")
