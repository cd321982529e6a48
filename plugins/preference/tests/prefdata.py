"""Hand-made episodes for the preference tests: tasks played better and worse, single- and multi-step."""
from __future__ import annotations

import json

from evolver import Episode, Step, Task

SYSTEM = {"role": "system", "content": "Write letters."}


def prompt(*user: str) -> str:
    """A stored step prompt: the system message and the user turns."""
    return json.dumps([SYSTEM, *({"role": "user", "content": u} for u in user)])


def episode(task_id: str, score: float, outputs: list[str], prompts: list[str] | None = None,
            actions: list[str] | None = None, run: str = "r1", program: str = "p1", seed: int = 0,
            split: str = "train", error: str | None = None) -> Episode:
    prompts = prompts or [prompt(f"Write the letter a ({task_id}).")] * len(outputs)
    actions = actions or outputs
    steps = [Step(index=i, prompt=p, output=o, action=a, observation="ok", reward=score)
             for i, (p, o, a) in enumerate(zip(prompts, outputs, actions))]
    task = Task(id=task_id, benchmark="letters", split=split, category=task_id.rsplit("/", 1)[-1][0], gold="aaaa")
    return Episode(task=task, program_id=program, program_hash=program, model="tiny", seed=seed, steps=steps,
                   score=score, won=score >= 1, run_id=run, purpose="eval", error=error,
                   rewards={"length": 0.5} if score else {})


def single_step(run: str = "r1") -> list[Episode]:
    """Task a0 played four times (1, 0, 0 with the same answer, 0.5); a1 twice (1, 0)."""
    t0, t1 = "letters/train/a0", "letters/train/a1"
    return [episode(t0, 1.0, ["aaaa"], seed=1, run=run), episode(t0, 0.0, ["bbbb"], seed=2, run=run),
            episode(t0, 0.0, ["bbbb"], seed=3, run=run), episode(t0, 0.5, ["abab"], seed=4, run=run),
            episode(t1, 1.0, ["aaaa"], seed=5, run=run), episode(t1, 0.0, ["bcbc"], seed=6, run=run)]


def multi_step(run: str = "r1") -> list[Episode]:
    """Task b0, three steps. The winner acts a, b, c; a loser acts a then x (it leaves the path at step 1);
    another starts from a different first prompt (another program's skills): it aligns nowhere."""
    t = "letters/train/b0"
    p0, p1, p2 = prompt("start"), prompt("start", "after a"), prompt("start", "after a", "after b")
    win = episode(t, 1.0, ["a!", "b!", "c!"], [p0, p1, p2], ["a", "b", "c"], seed=10, run=run)
    lose = episode(t, 0.0, ["a?", "x!", "y!"], [p0, p1, prompt("start", "after a", "after x")], ["a", "x", "y"],
                   seed=11, run=run)
    other = episode(t, 0.0, ["q"], [prompt("other skills", "start")], seed=12, run=run)
    return [win, lose, other]
