"""Data-parallel SFT (``evolver_training.parallel``): two CPU processes (gloo, under torchrun) that each compute
their share of a batch's micro-batches end with the gradient one process computes on the whole batch;
and ``torchrun -m evolver train --sft`` runs with rank 0 alone writing. This file is also the script
torchrun runs for the gradient check (``__main__``)."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

HERE = Path(__file__).resolve()
# max_grad_norm: high, so the gradient compared is the raw one; the loss divides by the batch's tokens
OPTIONS = {"micro_batch": 2, "share_prefix": 8, "max_grad_norm": 1e9, "autocast": False}


def tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return LlamaForCausalLM(config).eval()


def fixed_batch():
    """Nine samples of uneven lengths (an odd number of micro-batches), some sharing a prompt prefix."""
    from evolver_training.sft import SFTSample

    rng = random.Random(1)
    shared = [rng.randrange(64) for _ in range(12)]
    out = []
    for i in range(9):
        prompt = shared + [rng.randrange(64) for _ in range(rng.randrange(1, 5))] if i % 3 else \
            [rng.randrange(64) for _ in range(rng.randrange(3, 10))]
        out.append(SFTSample(prompt, [rng.randrange(64) for _ in range(rng.randrange(1, 6))], f"t{i}"))
    return out


def step_grads(mode: str) -> dict[str, torch.Tensor]:
    """The trainer's optimizer step (``SFTTrainer.step``) on the fixed batch; the gradient it steps with."""
    from evolver_training.optim import freeze_below
    from evolver_training.sft import SFTTrainer

    trainer = SFTTrainer(SimpleNamespace(config=SimpleNamespace(plugins={})), dict(OPTIONS, parallel=mode))
    from evolver_training import Optimiser

    par = trainer.par
    trainer.model = tiny_model()
    freeze_below(trainer.model, 1)  # frozen and trained weights in one model, as train_layers leaves them
    par.wrap(trainer.model)
    trainer.opt = Optimiser(par.parameters(), lr=1e-3, max_grad_norm=trainer.cfg.max_grad_norm, clip=par.clip_grad_norm,
                            total=1)
    trainer.total_steps = 1
    grads: dict[str, torch.Tensor] = {}
    step = trainer.opt.step

    def capture(*args, **kw):
        with full_grads(par):
            grads.update({n: p.grad.detach().clone() for n, p in trainer.model.named_parameters()
                          if p.grad is not None})
        return step(*args, **kw)
    trainer.opt.step = capture
    row = trainer.step(1, fixed_batch())
    grads["loss"] = torch.tensor(row["loss"])  # the reported loss is the whole batch's too
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
    out = tmp_path / "grads.pt"
    torchrun(str(HERE), "ddp,fsdp", str(out))  # one launch for both modes: starting costs most
    parallel = torch.load(out)
    single = step_grads("ddp")  # WORLD_SIZE is unset here: the plain single-process step
    assert len(single) > 1 and any(bool(g.abs().sum() > 0) for g in single.values())
    for mode in ("ddp", "fsdp"):
        assert set(single) <= set(parallel[mode]), mode
        for name, g in parallel[mode].items():  # FSDP shows the frozen weights' gradients as zeros
            want = single[name] if name in single else torch.zeros_like(g)
            assert torch.allclose(g, want, rtol=1e-5, atol=1e-7), (mode, name)


def test_torchrun_evolver_train_sft_writes_from_rank_0_only(tmp_path):
    sys.path.insert(0, str(HERE.parents[3] / "tests"))
    from tinymodel import build_tiny_model

    from evolver.store import Store

    tiny = build_tiny_model(tmp_path / "tiny", max_positions=2048)
    roles = [f"--set=roles.{r}.{k}={v}" for r in ("executor", "proposer", "builder", "judge")
             for k, v in (("backend", "transformers"), ("model", tiny), ("options.dtype", "fp32"))]
    proc = torchrun("-m", "evolver", "--plugin", str(HERE.parent / "skillrl_pathbench.py"),
                    "--store", str(tmp_path / "store"), "--set=benchmark=paths", "--set=benchmark_options={}",
                    "--set=plugins.skillrl.teacher=rules", "--set=plugins.skillrl.embedder=hashing",
                    "--set=plugins.skillrl.gold_per_category=1", *roles,
                    "train", "--sft", "--steps", "2", "--set=plugins.sft.per_category=1",
                    "--set=plugins.sft.batch_size=3", "--set=plugins.sft.autocast=false",
                    env={"EVOLVER_HOME": str(tmp_path / "home"), "EVOLVER_PLUGINS": "transformers,skillrl",
                         "HF_HUB_OFFLINE": "1"})
    out = proc.stdout + proc.stderr
    assert out.count("sft: 1/2 steps") == 1 and "committed as program sft-" in out  # rank 0 reports alone
    folders = list((tmp_path / "store" / "checkpoints").glob("*/sft-step-*"))
    assert [f.name for f in folders] == ["sft-step-2"] and (folders[0] / "model.safetensors").is_file()
    store = Store(tmp_path / "store" / "evolver.duckdb")
    assert store.query("SELECT count(*) FROM train_steps")[1][0][0] == 2
    store.close()


if __name__ == "__main__":  # under torchrun: each rank's share, rank 0 saves the summed gradient
    grads = {mode: step_grads(mode) for mode in sys.argv[1].split(",")}
    if int(os.environ["RANK"]) == 0:
        torch.save(grads, sys.argv[2])
    import torch.distributed as dist

    dist.destroy_process_group()
