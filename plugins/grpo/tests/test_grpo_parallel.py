"""Data-parallel GRPO updates (``evolver_training.parallel``): two CPU processes (gloo, under torchrun) that
each compute their share of a batch's micro-batches end with the gradient one process computes on the
whole batch. This file is also the script torchrun runs (``__main__``)."""
from __future__ import annotations

import copy
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

HERE = Path(__file__).resolve()
OPTIONS = {"micro_batch": 2, "share_prefix": 8, "beta": 0.05, "loss": "token", "max_grad_norm": 1e9,
           "autocast": False, "mu": 1}


def tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return LlamaForCausalLM(config).eval()


def fixed_batch():
    """Nine samples (five micro-batches: the ranks get three and two), some sharing a prompt prefix."""
    from evolver_grpo.samples import Sample

    rng = random.Random(1)
    shared = [rng.randrange(64) for _ in range(12)]
    out = []
    for i in range(9):
        prompt = shared + [rng.randrange(64) for _ in range(rng.randrange(1, 5))] if i % 3 else \
            [rng.randrange(64) for _ in range(rng.randrange(3, 10))]
        completion = [rng.randrange(64) for _ in range(rng.randrange(1, 6))]
        out.append(Sample(prompt, completion, None, traj=i, step=0, advantage=rng.uniform(-1, 1)))
    return out


def update_grads(mode: str) -> dict[str, torch.Tensor]:
    """The trainer's update (``GRPOTrainer._update``) on the fixed batch; the gradient it steps with."""
    from evolver_grpo.trainer import GRPOTrainer

    trainer = GRPOTrainer(SimpleNamespace(), dict(OPTIONS, parallel=mode))
    from evolver_training import Optimiser

    par = trainer.par
    trainer.model = tiny_model()
    trainer.ref = copy.deepcopy(trainer.model).requires_grad_(False)
    par.wrap(trainer.model)
    trainer.opt = Optimiser(par.parameters(), lr=1e-3, max_grad_norm=trainer.cfg.max_grad_norm, clip=par.clip_grad_norm)
    grads: dict[str, torch.Tensor] = {}
    step = trainer.opt.step

    def capture(*args, **kw):
        with full_grads(par):
            grads.update({n: p.grad.detach().clone() for n, p in trainer.model.named_parameters()
                          if p.grad is not None})
        return step(*args, **kw)
    trainer.opt.step = capture
    trainer._update(fixed_batch())
    return grads


def full_grads(par):
    """Whole gradients in the model (FSDP keeps each rank's shard)."""
    if par.wrapped is not None and par.mode == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        return FSDP.summon_full_params(par.wrapped, with_grads=True)
    import contextlib

    return contextlib.nullcontext()


def torchrun(*args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node 2 ARGS`` on CPU."""
    clean = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    clean.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           *args], env=clean, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_two_ranks_reach_the_gradient_of_one_process(tmp_path):
    torchrun(str(HERE), "ddp,fsdp", str(tmp_path / "grads.pt"))  # one launch for both modes: starting costs most
    parallel = torch.load(tmp_path / "grads.pt")
    single = update_grads("ddp")  # WORLD_SIZE is unset here: the plain single-process update
    assert single and any(bool(g.abs().sum() > 0) for g in single.values())
    for mode in ("ddp", "fsdp"):
        assert set(parallel[mode]) == set(single), mode
        for name, g in single.items():
            assert torch.allclose(parallel[mode][name], g, rtol=1e-5, atol=1e-7), (mode, name)


def test_one_process_schedules_every_micro_batch_unchanged():
    from evolver_training.parallel import Parallel

    one = Parallel()
    assert one.schedule(5) == [(k, True) for k in range(5)] and not one.on and one.broadcast("x") == "x"
    # two ranks: every other micro-batch; FSDP pads the shorter share with a zero-weight repeat
    assert Parallel(2, 1, mode="ddp").schedule(5) == [(1, True), (3, True)]
    assert Parallel(2, 1, mode="fsdp").schedule(5) == [(1, True), (3, True), (4, False)]
    assert Parallel(2, 1, mode="ddp").schedule(1) == [(0, False)]  # a rank without one still syncs


def test_torchrun_evolver_train_grpo_with_fsdp_plays_and_writes_on_rank_0(tmp_path, tiny_dir):
    from evolver.store import Store

    roles = [f"--set=roles.{r}.{k}={v}" for r in ("executor", "proposer", "builder", "judge")
             for k, v in (("backend", "transformers"), ("model", tiny_dir), ("options.dtype", "fp32"))]
    proc = torchrun("-m", "evolver", "--plugin", str(HERE.parent / "letterbench.py"), "--store", str(tmp_path / "s"),
                    "--set=benchmark=letters", "--set=benchmark_options={steps = 1}", *roles,
                    "train", "--trainer", "grpo", "--steps", "2", "--set=plugins.grpo.max_new_tokens=6",
                    "--set=plugins.grpo.autocast=false", "--set=plugins.grpo.micro_batch=2",
                    "--set=plugins.grpo.parallel=fsdp", "--set=plugins.grpo.eval_per_category=1",
                    env={"EVOLVER_HOME": str(tmp_path / "home"), "EVOLVER_PLUGINS": "transformers,grpo",
                         "HF_HUB_OFFLINE": "1"})
    out = proc.stdout + proc.stderr
    # rank 0 alone plays, evaluates (with the gathered weights) and reports
    assert out.count("grpo: 1/2 steps") == 1 and out.count("eval after step 2") == 1
    assert "committed as program grpo-" in out
    folders = list((tmp_path / "s" / "checkpoints").glob("*/step-*"))
    assert [f.name for f in folders] == ["step-2"]
    from safetensors.torch import load_file
    saved, base = load_file(folders[0] / "model.safetensors"), load_file(Path(tiny_dir) / "model.safetensors")
    assert {k: v.shape for k, v in saved.items()} == {k: v.shape for k, v in base.items()}  # whole, not a shard
    assert any(not torch.equal(saved[k], base[k]) for k in base)  # and trained
    store = Store(tmp_path / "s" / "evolver.duckdb")
    assert store.query("SELECT count(*) FROM train_steps")[1][0][0] == 2
    assert store.query("SELECT count(*) FROM episodes WHERE purpose = 'grpo'")[1][0][0] == 2 * 2 * 4
    store.close()


if __name__ == "__main__":  # under torchrun: each rank's share, rank 0 saves the summed gradient
    grads = {mode: update_grads(mode) for mode in sys.argv[1].split(",")}
    if int(os.environ["RANK"]) == 0:
        torch.save(grads, sys.argv[2])
    import torch.distributed as dist

    dist.destroy_process_group()
