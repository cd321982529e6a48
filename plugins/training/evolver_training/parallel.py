"""Data-parallel training under ``torchrun`` or ``accelerate launch`` (the SFT and GRPO trainers).

The launcher starts one process per device and sets ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK``;
:meth:`Parallel.from_env` reads them and joins the process group (gloo on CPU, nccl on CUDA). Without
them (or with ``WORLD_SIZE=1``) every method here is the plain single-process call, so a run that is
not launched in parallel computes exactly what it always did.

- **One writer.** Rank 0 alone opens the workspace (DuckDB has one writer): it builds the data (SFT
  samples; GRPO's rollouts and advantages) and :meth:`broadcast` hands it to the other ranks, which
  only compute gradients. Metrics, episodes and checkpoints are rank 0's.
- **Sharded micro-batches.** Every rank holds the whole batch and computes every ``world``-th of its
  micro-batches (:meth:`schedule`). The trainers' losses are sums over tokens with weights normalised
  over the *whole* batch (the SFT loss divides by the batch's token count, GRPO's ``token_weights``
  by its lengths), so the ranks' gradients add up to the single-process gradient of the batch.
- **Exact accumulation.** DDP (or FSDP) averages gradients over ranks; :meth:`backward` scales each
  loss by ``world``, so the average is that sum. Micro-batches before a rank's last one accumulate
  without communication (DDP's ``no_sync``); a rank left without a micro-batch (or, under FSDP, with
  fewer than the others: its collectives must line up) runs a repeat of one with its loss times 0.
- **FSDP** (``parallel = "fsdp"``): the parameters, gradients and optimizer state are sharded over the
  ranks (the whole model is one FSDP unit, gathered for each forward: the trainers call the trunk a
  varying number of times per micro-batch, so per-layer units would not line up across ranks). What
  reads whole weights on rank 0 (rollouts, evaluation, saving) runs inside :meth:`full_params`, which
  every rank enters.

The forward that needs gradients goes through the wrapper (:meth:`forward`), which calls
``fn(model, *args)``: the trainers compute log-probs from the trunk and the head (``logprobs.py``),
never the model's own ``forward``, and DDP only synchronises what runs inside its own forward.
"""
from __future__ import annotations

import contextlib
import inspect
import os
from typing import Any, Callable

import torch

MODES = ("ddp", "fsdp")


class _Call(torch.nn.Module):
    """``fn(model, *args, **kw)`` as a module's forward, so DDP/FSDP see the trainers' forward."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, fn: Callable, *args, **kw):
        return fn(self.model, *args, **kw)


class Parallel:
    """Where this process stands among the ranks, and the collective steps the trainers take.

    ``world``/``rank``/``local_rank`` come from the launcher; ``mode`` is ``"ddp"`` or ``"fsdp"``."""

    def __init__(self, world: int = 1, rank: int = 0, local_rank: int = 0, mode: str = "ddp"):
        if mode not in MODES:
            from evolver import ConfigError

            raise ConfigError(f"parallel = {mode!r}: choose from {', '.join(MODES)}")
        self.world, self.rank, self.local_rank, self.mode = world, rank, local_rank, mode
        self.wrapped: torch.nn.Module | None = None
        self.model: torch.nn.Module | None = None

    @classmethod
    def from_env(cls, mode: str = "ddp") -> "Parallel":
        """The launcher's ranks (one process when ``WORLD_SIZE`` is unset or 1), the process group
        joined and, on CUDA, this rank's device made current (so ``"cuda"`` means it when models load)."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        par = cls(world, int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")), mode)
        if world > 1:
            import torch.distributed as dist

            if torch.cuda.is_available():
                torch.cuda.set_device(par.local_rank)
            if not dist.is_initialized():
                dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        return par

    @property
    def on(self) -> bool:
        """True when more than one process trains."""
        return self.world > 1

    @property
    def main(self) -> bool:
        """Rank 0: the one that opens the workspace, plays rollouts and writes."""
        return self.rank == 0

    # ----------------------------------------------------------------------------- data
    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (pickled; the others pass anything, e.g. None)."""
        if not self.on:
            return obj
        import torch.distributed as dist

        box = [obj if self.main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def sum(self, values: list[float]) -> list[float]:
        """Each value summed over the ranks (metrics of the micro-batches each computed)."""
        if not self.on or not values:
            return list(values)
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def barrier(self) -> None:
        if self.on:
            import torch.distributed as dist

            dist.barrier()

    @property
    def device(self) -> torch.device:
        nccl = self.on and torch.cuda.is_available()
        return torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")

    # ----------------------------------------------------------------------------- model
    def wrap(self, model: torch.nn.Module) -> None:
        """Wrap ``model`` for gradient synchronisation (DDP, or FSDP). DDP starts every rank from rank
        0's weights. Call before making the optimizer, over :meth:`parameters`."""
        self.model = model
        if not self.on:
            return
        if self.mode == "fsdp":
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

            cuda = torch.cuda.is_available()
            dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
            self.broadcast_weights(model)  # FSDP's own sync_module_states refuses CPU tensors
            # use_orig_params: frozen and trainable weights (train_layers, LoRA) may share the one unit
            self.wrapped = FSDP(_Call(model), use_orig_params=True, device_id=dev)
        else:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [torch.cuda.current_device()] if torch.cuda.is_available() else None
            # buffers (rotary frequencies) are constants: no broadcast before every forward (the keyword
            # was renamed in torch 2.13)
            quiet = "forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DDP).parameters \
                else "broadcast_buffers"
            self.wrapped = DDP(_Call(model), device_ids=ids, **{quiet: False})

    def parameters(self) -> list[torch.nn.Parameter]:
        """The trainable parameters the optimizer steps (this rank's shards under FSDP)."""
        source = self.wrapped if self.wrapped is not None else self.model
        return [p for p in source.parameters() if p.requires_grad]

    def forward(self, fn: Callable, *args, **kw):
        """``fn(model, *args, **kw)``, through the wrapper when there is one."""
        if self.wrapped is None:
            return fn(self.model, *args, **kw)
        return self.wrapped(fn, *args, **kw)

    def schedule(self, n: int) -> list[tuple[int, bool]]:
        """The micro-batches (indices into ``n``) this rank computes, each with ``real``: False for a
        repeat whose loss counts 0 (a rank with none; under FSDP, a rank with fewer than the others)."""
        if not self.on:
            return [(k, True) for k in range(n)]
        mine = [(k, True) for k in range(self.rank, n, self.world)]
        want = -(-n // self.world) if self.mode == "fsdp" else 1
        while len(mine) < want and n:
            mine.append((len(mine) * self.world % n, False))
        return mine

    def micro_step(self, last: bool):
        """The context of one micro-batch's forward and backward: gradients are only synchronised in
        the rank's ``last`` one (DDP's ``no_sync`` before it; FSDP reduces every one)."""
        if self.wrapped is None or last or self.mode == "fsdp":
            return contextlib.nullcontext()
        return self.wrapped.no_sync()

    def backward(self, loss: torch.Tensor, real: bool = True) -> None:
        """``loss.backward()`` with the synchronised gradient the *sum* over ranks (DDP and FSDP average,
        so each loss counts ``world`` times); a repeat (``real`` False) counts 0."""
        scale = (self.world if self.on else 1) * (1.0 if real else 0.0)
        (loss * scale if scale != 1 else loss).backward()

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """The gradient's global norm, clipped to ``max_norm`` (over every rank's shard under FSDP)."""
        if self.wrapped is not None and self.mode == "fsdp":
            return self.wrapped.clip_grad_norm_(max_norm)
        return torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm)

    def full_params(self):
        """Whole weights in ``model`` for what rank 0 does with them (rollouts, evaluation, saving);
        every rank must enter it under FSDP. Nothing to do otherwise."""
        if self.wrapped is not None and self.mode == "fsdp":
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

            return FSDP.summon_full_params(self.wrapped, writeback=False, rank0_only=True)
        return contextlib.nullcontext()

    def broadcast_weights(self, model: torch.nn.Module) -> None:
        """Rank 0's weights and buffers copied into ``model`` on every rank (an unwrapped model)."""
        if not self.on:
            return
        import torch.distributed as dist

        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                dist.broadcast(t.data, src=0)

    def sync_from_main(self, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Rank 0's weights (and optimizer state) on every rank: after it resumed from a checkpoint."""
        if not self.on:
            return
        if self.mode == "fsdp":
            from evolver import EvolverError

            raise EvolverError("resuming a run with parallel = 'fsdp' is not supported yet: resume it with 'ddp'")
        self.broadcast_weights(self.model)
        if optimizer is not None:
            state = self.broadcast(optimizer.state_dict() if self.main else None)
            if not self.main:
                optimizer.load_state_dict(state)

    def close(self) -> None:
        """Leave the process group (the launcher's processes end after it)."""
        if self.on:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.barrier()
                dist.destroy_process_group()
