"""AutoSkill hybrid retrieval over a large bank: index build time and per-query latency.

Builds N synthetic skill cards (topic x action x audience combinations, seeded), indexes them with
BM25 (bm25s) and the dense embedder, then times retrievals of paraphrased queries end to end (query
embedding, BM25 scores, fusion, threshold, top-K). Prints one table row per embedder.

    .venv/bin/python bench/autoskill_retrieval.py [--n 10000] [--queries 200] [--threads 1]
        [--embedder all-MiniLM-L6-v2 hashing]
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

from evolver_autoskill.card import SkillCard
from evolver_autoskill.embed import load_embedder
from evolver_autoskill.retrieval import HybridRetriever, RetrievalConfig

TOPICS = ["email", "python script", "sql query", "budget spreadsheet", "blog post", "cover letter", "recipe",
          "travel plan", "unit test", "shell command", "resume", "press release", "lesson plan", "poem",
          "invoice", "contract clause", "bug report", "meeting notes", "tweet", "product description",
          "regex", "docker file", "excel formula", "marketing plan", "translation", "essay outline",
          "workout routine", "grant proposal", "api documentation", "data chart"]
ACTIONS = ["write", "review", "shorten", "translate", "format", "debug", "summarise", "rewrite formally",
           "explain", "optimise", "outline", "proofread"]
AUDIENCES = ["for my manager", "for children", "for a landlord", "for customers", "for beginners",
             "for a journal", "for investors", "for my team", "for a teacher", "for social media",
             "for a government office", "for engineers"]
RULES = ["keep it under 200 words", "use British spelling", "no exclamation marks", "start with a summary",
         "use bullet points", "sign with my full name", "avoid jargon", "add type hints", "cite sources",
         "use a friendly tone", "number every step", "end with a question"]


def make_cards(n: int, seed: int = 0) -> list[SkillCard]:
    rng = random.Random(seed)
    cards = []
    for i in range(n):
        topic, action, aud = rng.choice(TOPICS), rng.choice(ACTIONS), rng.choice(AUDIENCES)
        rules = rng.sample(RULES, 3)
        cards.append(SkillCard(
            name=f"{action}-{topic}-{i}".replace(" ", "-"), description=f"Use when asked to {action} a {topic} {aud}",
            instructions="\n".join(f"- {r}." for r in rules), triggers=[topic, action], tags=[topic.split()[0]]))
    return cards


def bench(embedder_name: str, cards: list[SkillCard], queries: list[str]) -> dict:
    embedder = load_embedder(embedder_name)
    t0 = time.perf_counter()
    retriever = HybridRetriever(embedder, RetrievalConfig()).index(cards)
    build = time.perf_counter() - t0
    retriever.retrieve(queries[0])  # warm-up
    lat = []
    injected = 0
    for q in queries:
        t = time.perf_counter()
        res = retriever.retrieve(q)
        lat.append(time.perf_counter() - t)
        injected += len(res.injected)
    t = time.perf_counter()
    retriever.index(cards[:-1] + [SkillCard(name="new-one", description="Use when writing a haiku",
                                            instructions="- 5-7-5 syllables.")])
    reindex = time.perf_counter() - t
    lat.sort()
    return {"embedder": embedder.name.split("/")[-1], "skills": len(cards), "index_s": build, "reindex_1_s": reindex,
            "p50_ms": 1000 * statistics.median(lat), "p95_ms": 1000 * lat[int(0.95 * (len(lat) - 1))],
            "mean_ms": 1000 * statistics.fmean(lat), "injected_per_query": injected / len(queries)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--embedder", nargs="+", default=["all-MiniLM-L6-v2", "hashing"])
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (1 is faster for one-sentence queries on a busy 2-core box)")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    cards = make_cards(args.n)
    rng = random.Random(1)
    queries = [f"could you {rng.choice(ACTIONS)} my {rng.choice(TOPICS)} {rng.choice(AUDIENCES)}, "
               f"{rng.choice(RULES)}" for _ in range(args.queries)]
    rows = [bench(name, cards, queries) for name in args.embedder]
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in r.values()) + " |")


if __name__ == "__main__":
    main()
