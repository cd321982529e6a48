"""``evolver export``: traces out of the store as Hugging Face ``datasets`` files that TRL loads unchanged.

- ``sft``: TRL's conversational language-modelling format, one row per model call:
  ``{"messages": [...the call's prompt, {"role": "assistant", "content": its output}]}``.
- ``preference``: TRL's conversational preference format (DPO, ORPO, KTO...), one row per step pair
  (:mod:`evolver_preference.mining`: the state where a worse episode left a better one's path):
  ``{"prompt": [...], "chosen": [{"role": "assistant", ...}], "rejected": [...]}``. TRL's format has one
  completion per side, so trajectory-level pairs over several turns are trained by ``evolver train
  --dpo`` only; for single-step episodes the two kinds are the same pairs.
- ``grpo``: TRL's prompt-only format, one row per episode: ``{"prompt": [...its first call's prompt]}``
  with ``answer`` (the task's gold, for reward functions, which TRL hands every extra column), and
  the episode's ``score``, ``won`` and ``reward_<name>`` columns.

Every row also carries ``task_id`` and where it came from (episode ids, step, scores). JSONL needs
nothing beyond the standard library; ``.parquet`` needs pyarrow (which ``datasets`` brings).
"""
from __future__ import annotations

import json
from pathlib import Path

import click

FORMATS = ("sft", "preference", "grpo")


def sft_rows(episodes, min_score: float | None = None) -> list[dict]:
    from evolver_preference.mining import turns

    rows = []
    for ep in episodes:
        if min_score is not None and ep.score < min_score:
            continue
        for i, t in enumerate(turns(ep)):
            rows.append({"messages": t.prompt + [{"role": "assistant", "content": t.completion}],
                         "task_id": ep.task.id, "episode_id": ep.id, "step": i, "score": ep.score})
    return rows


def preference_rows(episodes, min_gap: float = 0.0, max_per_task: int | None = 4) -> list[dict]:
    from evolver_preference.mining import step_pairs

    return [{"prompt": p.prompt, "chosen": [{"role": "assistant", "content": p.chosen[0].completion}],
             "rejected": [{"role": "assistant", "content": p.rejected[0].completion}], "task_id": p.task_id,
             "step": p.step, "score_chosen": p.score_chosen, "score_rejected": p.score_rejected,
             "chosen_episode": p.chosen_episode, "rejected_episode": p.rejected_episode}
            for p in step_pairs(episodes, min_gap=min_gap, max_per_task=max_per_task)]


def grpo_rows(episodes) -> list[dict]:
    from evolver_preference.mining import turns

    names = sorted({name for ep in episodes for name in ep.rewards})
    rows = []
    for ep in episodes:
        first = turns(ep)
        if not first:
            continue
        gold = ep.task.gold
        rows.append({"prompt": first[0].prompt, "task_id": ep.task.id,
                     "answer": gold if isinstance(gold, str) or gold is None else json.dumps(gold),
                     "episode_id": ep.id, "score": ep.score, "won": ep.won,
                     **{f"reward_{n}": ep.rewards.get(n) for n in names}})  # every row the same columns
    return rows


def write(rows: list[dict], out: Path) -> Path:
    """``rows`` as JSON lines (``.jsonl``, ``.json``) or a parquet file (``.parquet``, needs pyarrow)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix in (".jsonl", ".json"):
        with out.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    elif out.suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            from evolver import EvolverError

            raise EvolverError("writing .parquet needs pyarrow (pip install pyarrow, or `datasets`, which brings "
                               "it); or write .jsonl, which `datasets` loads as well") from None
        pq.write_table(pa.Table.from_pylist(rows), str(out))
    else:
        from evolver import EvolverError

        raise EvolverError(f"--out {out}: write .jsonl or .parquet")
    return out


def export_rows(store, fmt: str, runs=(), programs=(), split: str | None = "train", min_score: float | None = None,
                min_gap: float = 0.0, max_per_task: int | None = 4) -> list[dict]:
    from evolver_preference.mining import load_episodes

    episodes = load_episodes(store, runs, programs, split)
    if fmt == "sft":
        return sft_rows(episodes, min_score)
    if fmt == "preference":
        return preference_rows(episodes, min_gap, max_per_task)
    return grpo_rows(episodes)


@click.command(name="export")
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True,
              help="sft: {messages}; preference: {prompt, chosen, rejected}; grpo: {prompt} and scores.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="A .jsonl or .parquet file.")
@click.option("--program", "programs", multiple=True, help="Only this program's episodes (id or tag; repeatable).")
@click.option("--run", "runs", multiple=True, help="Only this run's episodes (repeatable).")
@click.option("--split", type=click.Choice(["train", "dev", "test", "all"]), default="train", show_default=True,
              help="Episodes of this split (dev and test are for measuring, not training).")
@click.option("--min-score", type=float, default=None, help="sft: only episodes scoring at least this.")
@click.option("--min-gap", type=float, default=0.0, show_default=True,
              help="preference: a pair's scores differ by at least this (and by more than 0).")
@click.option("--max-pairs-per-task", type=int, default=4, show_default=True,
              help="preference: pairs kept per task, the widest gaps first (0: all).")
@click.pass_obj
def export_cmd(obj, fmt, out, programs, runs, split, min_score, min_gap, max_pairs_per_task):
    """Write traces from the store as a Hugging Face dataset file (JSONL or parquet) in TRL's formats.

    Load it with datasets.load_dataset("json", data_files=OUT) (or "parquet"); TRL's SFT, DPO and GRPO
    trainers take it as it is."""
    from evolver import open_workspace

    config = obj.config()
    store, repo = open_workspace(config, read_only=True)
    with store:
        ids = [program_id(repo, ref) for ref in programs]
        rows = export_rows(store, fmt, runs, ids, None if split == "all" else split, min_score, min_gap,
                           max_pairs_per_task or None)
    path = write(rows, Path(out))
    click.echo(f"{len(rows)} {fmt} rows -> {path}")
    if not rows:
        click.echo("nothing matched: check --run / --program / --split"
                   + (" (preference rows need two episodes of a task with different scores)" if fmt == "preference"
                      else ""), err=True)


def program_id(repo, ref: str) -> str:
    """A program id from an id, a tag (``best``) or a commit; the ref itself when the repository does not know it."""
    from evolver import EvolverError

    try:
        return repo.manifest(ref).get("id") or ref
    except (EvolverError, OSError):
        return ref
