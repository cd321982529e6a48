"""Fine-tune a parent's policy in a run of its own and return the checkpoint (shared by both proposers).

The training run (``<loop run>-<operator>-it<N>``) has its own copy of the model, loaded from the
parent's checkpoint when it has one: the loop's executor, which every other program plays with, is
never trained in place. Its steps land in ``train_steps`` and its status in ``runs``.
"""
from __future__ import annotations


from evolver import ConfigError, plugin_options


def split_options(own_model, raw: dict, section: str, sft_defaults: dict | None = None) -> tuple:
    """``[plugins.<section>]`` holds the proposer's own keys and any cold-start SFT key
    (``evolver_training.SFTOptions``: lr, epochs, batch_size, train_layers, ...);
    ``sft_defaults`` are the proposer's own defaults for the latter."""
    from evolver_training import SFTOptions, load_sft

    raw = {**(sft_defaults or {}), **dict(raw or {})}
    own = {k: v for k, v in raw.items() if k in own_model.model_fields}
    rest = {k: v for k, v in raw.items() if k not in own}
    unknown = [k for k in rest if k not in SFTOptions.model_fields]
    if unknown:
        known = sorted(set(own_model.model_fields) | set(SFTOptions.model_fields))
        raise ConfigError(f"[plugins.{section}]: unknown key(s) {unknown}; known keys: {', '.join(known)}")
    cfg = plugin_options(own_model, own, section)
    load_sft(rest, section=section)  # fail at start-up on a bad SFT option, not mid-run
    return cfg, rest


def lineage(run, program_id: str) -> list[dict]:
    """Manifests from ``program_id`` up to the seed (the program first)."""
    out, pid, seen = [], program_id, set()
    while pid and pid not in seen:
        seen.add(pid)
        manifest = run.repo.manifest(pid)
        out.append(manifest)
        pid = manifest.get("parent", "")
    return out


def train_from(loop_run, parent, iteration: int, operator: str, sft_options: dict, episodes=None) -> dict:
    """SFT from ``parent``'s weights; returns the trainer's summary (``checkpoint``: a folder relative
    to the workspace). ``episodes``: the training trajectories (else the demonstrations SFT picks)."""
    from evolver_training import SFTTrainer

    start = loop_run.checkpoint_of(parent)
    train_id = f"{loop_run.id}-{operator}-it{iteration}"
    train_run = loop_run.training_run(parent, train_id)
    opts = {"write_choice": False, **sft_options, "program": parent.id, "commit": False}

    def show(row: dict) -> None:
        loop_run.status = f"iteration {iteration}: {operator} step {row['step']} loss {row['loss']:.3f}"
    try:
        summary = SFTTrainer(train_run, opts, progress=show, episodes=episodes).train()
    except BaseException:
        loop_run.store.update_run(train_id, status="failed")
        raise
    finally:
        train_run.close()
    losses = [h["loss"] for h in summary["history"]]
    loop_run.store.update_run(train_id, status="finished", summary={
        "steps": summary["steps"], "checkpoint": summary["checkpoint"], "loss": losses,
        "samples": summary["samples"], "trajectories": summary["trajectories"]})
    return {**summary, "train_run": train_id, "from": start or "the configured executor model", "losses": losses}


def describe(summary: dict) -> str:
    losses = summary["losses"]
    trend = f"loss {losses[0]:.2f} -> {losses[-1]:.2f}" if losses else "no steps"
    return (f"{summary['samples']} steps of {summary['trajectories']} trajectories, "
            f"{summary['steps']} optimizer steps, {trend}")
