"""Bank size and version counts after replaying multi-turn conversations through `evolver serve`.

Users with stable preferences hold many conversations: each opens with a task, and later turns add a
durable preference (paraphrased), a one-off tweak, a repeated correction, or switch topic. Every
conversation is replayed turn by turn over HTTP (each request carries the history so far), as a
client would; extraction runs in the server's background learner with the real all-MiniLM-L6-v2.
Prints, per user scope: requests, skills, commits, adds / merges / discards, versions, caps.

    .venv/bin/python bench/autoskill_replay.py [--users 3] [--conversations 20] [--seed 0] [--threads 1]
"""
from __future__ import annotations

import argparse
import random
import tempfile
from collections import Counter
from pathlib import Path

import httpx

from evolver import open_workspace
from evolver.backends.scripted import ScriptedBackend
from evolver_autoskill import records
from evolver_autoskill.options import AutoSkillOptions
from evolver_autoskill.serve import Server, build_app
from evolver_autoskill.service import AutoSkillService

# Per persona: tasks (topics) and durable preferences, each stated in several paraphrases.
PERSONAS = {
    "ana": {"tasks": ["Write an email to my landlord about the broken heating.",
                      "Draft an email to the school about my son's absence next week.",
                      "Write a short email to my bank asking about a duplicate charge."],
            "prefs": [["Always sign my emails with 'Best, Ana'.", "Remember to sign emails as 'Best, Ana'.",
                       "From now on end every email with 'Best, Ana'."],
                      ["Never use exclamation marks.", "Please don't ever use exclamation marks in my emails."]]},
    "ben": {"tasks": ["Write a python function that parses a CSV file of orders.",
                      "Write a python script that renames photos by their date.",
                      "Refactor this python class that caches API responses."],
            "prefs": [["Always add type hints to python code.", "I prefer type hints on every function.",
                       "Make sure every python function has type hints."],
                      ["Use pathlib instead of os.path.", "Please always use pathlib, not os.path."]]},
    "cai": {"tasks": ["Summarise this quarterly report for the board.", "Summarise the meeting notes from today.",
                      "Give me a summary of this research paper on solar panels."],
            "prefs": [["Use bullet points, not paragraphs.", "I prefer bullet points over paragraphs.",
                       "Always answer summaries in bullet points."],
                      ["Keep summaries to at most five bullets.", "No more than five bullet points please."]]},
}
ONE_OFF = ["Make it a bit shorter.", "Translate the last sentence into French.", "Thanks, that works.",
           "Can you give another version?", "What time zone is Lisbon in?"]
OFF_TOPIC = ["What's a good vegetarian dinner recipe for four people?", "Explain how vaccines train the immune system.",
             "Plan a three-day trip to Porto in spring."]


def conversation(rng: random.Random, persona: dict) -> list[str]:
    turns = [rng.choice(persona["tasks"])]
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.45:
            turns.append(rng.choice(rng.choice(persona["prefs"])))
        elif roll < 0.75:
            turns.append(rng.choice(ONE_OFF))
        elif roll < 0.9 and len(turns) > 1:
            turns.append(turns[-1])  # the user repeats a correction the answer ignored
        else:
            turns.append(rng.choice(OFF_TOPIC))
    return turns


def semver(v: str) -> tuple:
    return tuple(map(int, v.split(".")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=3)
    ap.add_argument("--conversations", type=int, default=20, help="per user")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--embedder", default="all-MiniLM-L6-v2")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="autoskill-replay-"))
    store, _ = open_workspace(work)
    service = AutoSkillService(work / "autoskill", store, AutoSkillOptions(embedder=args.embedder))
    app = build_app(service, ScriptedBackend(rule=lambda req: "Here you go."), "scripted")
    server = Server(app, "127.0.0.1", 0).start()
    users = list(PERSONAS)[:args.users]
    requests = Counter()
    with httpx.Client(timeout=120) as client:
        for c in range(args.conversations):
            for user in users:
                history = []
                for turn in conversation(rng, PERSONAS[user]):
                    history.append({"role": "user", "content": turn})
                    r = client.post(server.url + "/chat/completions", json={"model": "m", "messages": history,
                                                                            "user": user})
                    r.raise_for_status()
                    history.append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]})
                    requests[user] += 1
    service.drain()
    server.stop()
    cols = ["scope", "conversations", "requests (= user turns)", "skills", "commits", "add", "merge", "discard",
            "max version", "versions per skill", "max triggers", "max instr chars"]
    rows = []
    for user in users:
        bank = service.bank(user)
        cards = bank.cards()
        acts = Counter(e["action"] for e in records.events(store, user))
        versions = bank.versions()
        rows.append([user, args.conversations, requests[user], len(cards), len(bank.log()) - 1, acts["add"],
                     acts["merge"], acts["discard"], max((c.version for c in cards), default="-", key=semver),
                     " ".join(str(len(v)) for v in versions.values()) or "-",
                     max((len(c.triggers) for c in cards), default=0),
                     max((len(c.instructions) for c in cards), default=0)])
    service.close()
    store.close()
    print(f"{args.conversations} conversations per user, seed {args.seed}, embedder {args.embedder}; work dir {work}")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(map(str, r)) + " |")
    for user in users:
        for c in service.bank(user).cards():
            print(f"  {user}/{c.name} v{c.version}: {c.instructions.splitlines()[:4]}")


if __name__ == "__main__":
    main()
