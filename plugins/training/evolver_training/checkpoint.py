"""Checkpoints: a plain HF folder in the workspace, committed as a program that points at it.

The folder is ``<workspace>/checkpoints/<run id>/step-<n>`` (weights as safetensors, config and
tokenizer), so ``evolver eval --model`` or any HF tool loads it. A LoRA model is merged first. The
program commit is the trained program's child: same skills and harness, and a manifest whose
``model`` is the folder (relative to the workspace); the model is part of the program's content
hash, so its evaluations never mix with the parent's.
"""
from __future__ import annotations

import copy
import random
from pathlib import Path

import torch

STATE = "trainer_state.pt"  # what resuming needs beyond the weights


def save(model, tokenizer, folder: Path) -> Path:
    """``model`` (LoRA adapters merged into a copy) and ``tokenizer`` as a HF safetensors folder; returns it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "merge_and_unload"):
        model = copy.deepcopy(model).merge_and_unload()
    model.save_pretrained(str(folder), safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    return folder


def save_step(trainer, step: int) -> Path:
    """Weights and trainer state of ``step``; returns the folder relative to the workspace."""
    run = trainer.run
    rel = Path("checkpoints") / run.id / f"step-{step}"
    save(trainer.model, getattr(trainer.engine.backend, "tokenizer", None), run.workspace / rel)
    save_state(trainer, run.workspace / rel, step)
    return rel


def save_and_commit(trainer, step: int, evaluation: dict | None = None):
    """Save ``step`` (:func:`save_step`) and commit it as a child program of the trainer's whose manifest
    ``model`` names the checkpoint; returns what ``run.commit_child`` returns."""
    run = trainer.run
    rel = save_step(trainer, step)
    parent = trainer.program
    last = trainer.history[-1] if trainer.history else {}
    manifest = {"parent": parent.id, "operator": "grpo", "model": rel.as_posix(),
                "proposal": f"GRPO {trainer.cfg.estimator}, {step} steps"}
    message = (f"grpo: {trainer.cfg.estimator} step {step} on {run.config.benchmark}\n\n"
               f"reward_mean {last.get('reward_mean', 0):.3f}"
               + (f", {trainer.cfg.eval_split} score {evaluation['score']:.3f}" if evaluation else ""))
    return run.commit_child(parent, f"grpo-{run.id}-s{step}", manifest, message)


def save_state(trainer, folder: Path, step: int) -> None:
    """Optimizer, RNG and task-queue state next to the weights, so ``evolver train --resume`` goes on
    from this step. A LoRA run also keeps its adapter weights here (the folder's weights are merged)."""
    state = {"step": step, "optimizer": trainer.opt.state_dict(), "torch_rng": torch.get_rng_state(),
             "rng": trainer.rng.getstate(), "queue": [t.id for t in trainer._queue], "history": trainer.history,
             "extra": trainer.resume_extra() if hasattr(trainer, "resume_extra") else {}}  # a subclass's own state
    if trainer.cfg.lora:
        state["trainable"] = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    write_state(folder, state)


def write_state(folder: Path, state: dict, prefix: str = "step-") -> None:
    """``state`` next to the weights in ``folder``; the run's older states (same ``prefix``) go."""
    torch.save(state, Path(folder) / STATE)
    for older in Path(folder).parent.glob(f"{prefix}*/{STATE}"):  # optimizer state is big: keep the newest
        if older.parent != Path(folder):
            older.unlink()


def latest_state(workspace: Path, run_id: str, prefix: str = "step-") -> tuple[Path, dict] | None:
    """The newest checkpoint of a run that can be resumed from, and its trainer state (``prefix``:
    the trainer's folder names, ``step-N`` for GRPO)."""
    def number(folder: Path) -> int:
        tail = folder.name[len(prefix):]
        return int(tail) if tail.isdigit() else -1
    folders = sorted((Path(workspace) / "checkpoints" / run_id).glob(f"{prefix}*"), key=number)
    for folder in reversed(folders):
        if (folder / STATE).is_file():
            return folder, torch.load(folder / STATE, weights_only=False)
    return None


def load_weights(model, folder: Path) -> None:
    """Copy a checkpoint folder's safetensors into ``model`` in place (tied weights may be absent)."""
    from safetensors.torch import load_file

    weights = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        weights.update(load_file(str(f)))
    model.load_state_dict(weights, strict=False)


def restore(trainer, folder: Path, state: dict) -> int:
    """Load a checkpoint into the learner (and so the engine), optimizer and RNGs; return its step."""
    if trainer.cfg.lora:
        params = dict(trainer.model.named_parameters())
        with torch.no_grad():
            for name, value in state["trainable"].items():
                params[name].copy_(value)
    else:
        load_weights(trainer.model, folder)
    trainer.opt.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    trainer.rng = random.Random()
    trainer.rng.setstate(state["rng"])
    by_id = {t.id: t for t in trainer.tasks}
    trainer._queue = [by_id[i] for i in state["queue"] if i in by_id]
    trainer.history = list(state.get("history", []))
    return int(state["step"])
