"""DPO and Step-DPO on pairs mined from the trace store (``evolver train --dpo`` / ``--step-dpo``).

1. **Pairs.** :mod:`evolver_preference.mining`: ``dpo`` takes episode pairs (the whole trajectory is
   the completion: its log-prob is the sum over the episode's model calls), ``step-dpo`` step pairs
   (the state where the worse episode left the better one's path, and the two actions there).
2. **Tokens.** Every turn's prompt is rendered by the learner's chat template (``chat_ids``, as the
   engine renders it when it plays) and the completion is the stored output plus the end-of-turn
   token, so the policy is trained on what it wrote and would write.
3. **Reference.** The starting model's sequence log-probs of every pair, computed once before the
   first update (TRL's ``precompute_ref_log_probs``): the reference is the frozen starting model
   without a second copy of its weights in memory, with LoRA or without.
4. **Loss.** ``-(1 - ε) log σ(z) - ε log σ(-z)``, ``z = β((π_c - ref_c) - (π_r - ref_r))`` over sequence
   log-probs (ε = ``label_smoothing``: cDPO; 0 is DPO). Each step reports the loss, the reward
   accuracy (the share of pairs whose implicit reward ``β(π - ref)`` ranks chosen above rejected), the
   mean margin and the chosen and rejected rewards; rows go to ``train_steps`` as they come.
5. **Checkpoint.** An HF folder under ``<workspace>/checkpoints/<run>/<trainer>-step-<n>``, committed as a
   child of ``program`` whose manifest ``model`` names it, so ``evolver eval --program ID`` plays it.

One process; it does not resume (a run is short: train again).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from evolver import EvolverError, Message, Trainer, evaluate_many, summarize
from evolver_preference.config import DPOConfig, load
from evolver_preference.mining import Pair, mine

Segment = tuple[list[int], list[int]]  # (prompt ids, completion ids) of one model call


def dpo_loss(pi_c: torch.Tensor, pi_r: torch.Tensor, ref_c: torch.Tensor, ref_r: torch.Tensor, beta: float,
             label_smoothing: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair DPO loss and the implicit rewards ``β(π - ref)`` of chosen and rejected (detached), from
    sequence log-probs. ``label_smoothing`` ε > 0 is conservative DPO (cDPO, Mitchell 2023)."""
    chosen, rejected = beta * (pi_c - ref_c), beta * (pi_r - ref_r)
    z = chosen - rejected
    loss = -(1 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)
    return loss, chosen.detach(), rejected.detach()


@dataclass
class TokenPair:
    pair: Pair
    chosen: list[Segment]
    rejected: list[Segment]


def tokenize(pairs: list[Pair], backend, max_prompt_tokens: int) -> tuple[list[TokenPair], int]:
    """Pairs as token ids (the module docstring's step 2); returns (kept, dropped for length)."""
    end = getattr(backend, "end_id", None)

    def segment(turn) -> Segment:
        prompt = list(backend.chat_ids([Message(**m) for m in turn.prompt]))
        completion = list(backend.tokenizer(turn.completion, add_special_tokens=False)["input_ids"])
        return prompt, completion + ([end] if end is not None else [])
    out, dropped = [], 0
    for p in pairs:
        tp = TokenPair(p, [segment(t) for t in p.chosen], [segment(t) for t in p.rejected])
        if max(len(s[0]) for s in tp.chosen + tp.rejected) > max_prompt_tokens:
            dropped += 1
            continue
        out.append(tp)
    return out, dropped


class DPOTrainer(Trainer):
    """DPO on episode pairs (``dpo``); :class:`StepDPOTrainer` is the same on step pairs."""

    flag = True  # `evolver train --dpo`: never the default trainer
    name = "dpo"
    pairs_kind = "episode"
    columns = ("loss {loss:.4f}", "acc {reward_acc:.2f}", "margin {margin:+.4f}", "chosen {chosen_reward:+.4f}",
               "rejected {rejected_reward:+.4f}", "{step_s:.1f}s")

    def __init__(self, run, options: dict | None = None, engine=None, progress=None, pairs: list[Pair] | None = None):
        self.run = run
        self.cfg: DPOConfig = load(options if options is not None else run.config.plugins.get(self.name, {}),
                                   self.name)
        self._engine = engine
        self.given = pairs  # pairs chosen by the caller instead of mined
        self.progress = progress or (lambda row: None)
        self.history: list[dict] = []

    # ---------------------------------------------------------------------------------- set-up
    def setup(self) -> None:
        from evolver_training import make_engine

        cfg, run = self.cfg, self.run
        torch.manual_seed(cfg.seed)
        self.program = run.repo.checkout(cfg.program)
        pairs = self.given if self.given is not None else mine(
            run.store, self.pairs_kind, cfg.runs, cfg.programs, cfg.split, cfg.min_gap, cfg.max_pairs_per_task,
            cfg.purposes)
        if not pairs:
            raise EvolverError(
                f"no {self.pairs_kind} pairs for {self.name} in the store (runs {cfg.runs or 'any'}, programs "
                f"{cfg.programs or 'any'}, split {cfg.split}): it needs episodes of one task with different scores"
                + (" and the same first prompt" if self.pairs_kind == "episode" else
                   " that share a state and then act differently")
                + "; play training tasks more than once (GRPO rollouts, expert iteration, `evolver eval --split "
                  "train` of two programs) or lower plugins." + self.name + ".min_gap")
        self.engine = self._engine or make_engine(run, cfg.engine)
        self.model = self.engine.learner()
        self.base_id = getattr(self.engine.backend, "base_model", "")
        if cfg.lora:
            from peft import LoraConfig, get_peft_model

            self.model = get_peft_model(self.model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
                                                               target_modules=cfg.lora_targets, lora_dropout=0.0))
        self.model.eval()  # no dropout: the first step's policy is exactly the reference
        self.data, self.dropped = tokenize(pairs, self.engine.backend, cfg.max_prompt_tokens)
        if not self.data:
            raise EvolverError(f"every {self.name} pair was longer than max_prompt_tokens={cfg.max_prompt_tokens}; "
                               f"raise it with --set plugins.{self.name}.max_prompt_tokens=N")
        with torch.no_grad():  # the reference: the starting model, once
            self.ref = torch.cat([self.logps(self.data[i:i + cfg.micro_batch])
                                  for i in range(0, len(self.data), cfg.micro_batch)])
        from evolver_training import Optimiser

        self.opt = Optimiser([p for p in self.model.parameters() if p.requires_grad], lr=cfg.lr,
                             weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm)
        per_epoch = -(-len(self.data) // cfg.batch_size)
        self.total_steps = cfg.steps if cfg.steps is not None else per_epoch * cfg.epochs

    def logps(self, items: list[TokenPair]) -> torch.Tensor:
        """``[len(items), 2]``: each pair's chosen and rejected sequence log-probs (summed over its turns)."""
        from evolver_training import completion_logprobs

        cfg = self.cfg
        segs = [(k, side, s) for k, tp in enumerate(items) for side, part in enumerate((tp.chosen, tp.rejected))
                for s in part]
        lp = completion_logprobs(self.model, [s[0] for _, _, s in segs], [s[1] for _, _, s in segs],
                                 chunk=cfg.logprob_chunk, autocast=cfg.autocast, share=cfg.share_prefix)
        sums = torch.stack([part.sum() for part in lp.split([len(s[1]) for _, _, s in segs])])
        owner = torch.tensor([2 * k + side for k, side, _ in segs], device=sums.device)
        return torch.zeros(2 * len(items), device=sums.device, dtype=sums.dtype).index_add(0, owner, sums).view(-1, 2)

    def batches(self):
        """Batches of pair indices, reshuffled each epoch, until ``total_steps``."""
        rng = random.Random(self.cfg.seed)
        n = 0
        while True:
            order = list(range(len(self.data)))
            rng.shuffle(order)
            for i in range(0, len(order), self.cfg.batch_size):
                if n >= self.total_steps:
                    return
                n += 1
                yield order[i:i + self.cfg.batch_size]

    # ---------------------------------------------------------------------------------- train
    def step(self, n: int, batch: list[int]) -> dict:
        cfg = self.cfg
        t0 = time.perf_counter()
        self.opt.begin()
        sums = {"loss": 0.0, "acc": 0.0, "chosen": 0.0, "rejected": 0.0, "lp_c": 0.0, "lp_r": 0.0}
        for i in range(0, len(batch), cfg.micro_batch):  # gradients accumulate to the whole batch's mean
            idx = batch[i:i + cfg.micro_batch]
            pi = self.logps([self.data[j] for j in idx])
            ref = self.ref[idx].to(pi.device)
            loss, chosen, rejected = dpo_loss(pi[:, 0], pi[:, 1], ref[:, 0], ref[:, 1], cfg.beta, cfg.label_smoothing)
            (loss.sum() / len(batch)).backward()
            sums["loss"] += float(loss.detach().sum())
            sums["acc"] += float((chosen > rejected).float().sum())
            sums["chosen"] += float(chosen.sum())
            sums["rejected"] += float(rejected.sum())
            sums["lp_c"] += float(pi[:, 0].detach().sum())
            sums["lp_r"] += float(pi[:, 1].detach().sum())
        gn = self.opt.finish()
        m = {k: v / len(batch) for k, v in sums.items()}
        row = {"step": n, "loss": m["loss"], "reward_acc": m["acc"], "margin": m["chosen"] - m["rejected"],
               "chosen_reward": m["chosen"], "rejected_reward": m["rejected"], "logp_chosen": m["lp_c"],
               "logp_rejected": m["lp_r"], "grad_norm": float(gn), "lr": cfg.lr, "pairs": len(batch),
               "step_s": time.perf_counter() - t0, "trainer": self.name}
        self.history.append(row)
        self.run.add_train_steps([row])
        self.progress(row)
        return row

    def evaluate(self) -> dict:
        cfg = self.cfg
        tasks = self.run.benchmark.tasks(cfg.eval_split, per_category=cfg.eval_per_category)
        eps = evaluate_many([(self.run.context(self.program), tasks)], self.run.benchmark, self.engine.backend,
                            store=self.run.store, run=self.run, purpose=f"{self.name}-eval")[0]
        ev = summarize(self.program.id, cfg.eval_split, eps)
        return {**ev.metrics(), "per_category": ev.per_category}

    def train(self, resume: bool = False) -> dict:
        if resume:
            raise EvolverError(f"the {self.name} trainer does not resume: start it again "
                               f"(`evolver train --{self.name}`)")
        self.setup()
        cfg, run = self.cfg, self.run
        evals = [{"step": 0, **self.evaluate()}] if cfg.eval_per_category else []
        n = 0
        for batch in self.batches():
            n += 1
            run.status = f"{self.name} step {n}"
            self.step(n, batch)
            if cfg.eval_per_category and cfg.eval_every and n % cfg.eval_every == 0 and n < self.total_steps:
                self.engine.sync(self.model, f"{self.base_id}+{self.name}:{run.id}:{n}")
                evals.append({"step": n, **self.evaluate()})
        self.engine.sync(self.model, f"{self.base_id}+{self.name}:{run.id}:{n}")
        if cfg.eval_per_category:
            evals.append({"step": n, **self.evaluate()})
        out = {"steps": n, "history": self.history, "evals": evals, "pairs": len(self.data), "dropped": self.dropped}
        rel = Path("checkpoints") / run.id / f"{self.name}-step-{n}"
        from evolver_training import save_checkpoint

        save_checkpoint(self.model, getattr(self.engine.backend, "tokenizer", None), run.workspace / rel)
        if not cfg.commit:
            return {**out, "checkpoint": rel.as_posix(), "program": None}
        last = self.history[-1] if self.history else {}
        manifest = {"parent": self.program.id, "operator": self.name, "model": rel.as_posix(),
                    "proposal": f"{self.name} on {len(self.data)} {self.pairs_kind} pairs, {n} steps"}
        message = (f"{self.name}: {len(self.data)} {self.pairs_kind} pairs from the trace store, {n} steps, beta "
                   f"{cfg.beta}\n\nloss {last.get('loss', 0):.4f}, reward accuracy {last.get('reward_acc', 0):.2f}, "
                   f"margin {last.get('margin', 0):+.4f}")
        program = run.commit_child(self.program, f"{self.name}-{run.id}-s{n}", manifest, message)
        return {**out, "checkpoint": rel.as_posix(), "program": program.id}


class StepDPOTrainer(DPOTrainer):
    """Step-DPO: the pair is the first step where a worse episode left a better one's path."""

    name = "step-dpo"
    pairs_kind = "step"
