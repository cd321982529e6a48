"""On-policy self-distillation (``evolver train --distill``): one model is its own teacher.

The teacher is the policy given privileged context z that the student lacks (the program's skills, a
training task's gold answer, a hint); the student samples, and the loss is the token-level divergence
between the teacher's and the student's next-token distributions on the student's own tokens
(SDFT, SDPO, OPSD: ``../shared/seeds/13-self-distillation.md``):

    L(θ) = mean over student tokens t of  D( q_θ(· | x, z, ŷ<t) , π_θ(· | x, ŷ<t) ),   ŷ ~ π_θ(· | x)

with the teacher q under ``no_grad`` (the same weights, detached) and D forward KL, reverse KL or JSD,
over the whole vocabulary.

One step:
1. **Rollout.** ``tasks_per_step`` training tasks, each played ``samples_per_task`` times by the student
   program through its harness at ``temperature``; every model call keeps its exact prompt and
   completion ids (``Step.sample``). With ``privileged = "skills"`` the student program is the program
   without its skills (``evolver.variant(program, "none")``).
2. **Teacher prompts.** Each student call's chat messages (``Step.prompt``) with the system message
   swapped for the teacher's, rendered by the engine's chat template (:class:`Privileged`). The student's
   own prompt ids are used as they are, never re-rendered.
3. **Update.** Both forwards on the same completion tokens; only the completion positions reach the LM
   head, a chunk at a time (recomputed in the backward pass), so the [tokens, vocabulary] logits of a
   whole batch never exist.
4. **Sync.** The engine generates with the new weights.

The checkpoint is committed as the trained program's child; with ``privileged = "skills"`` and
``drop_skills`` the child has no skills, so its episodes cost fewer context tokens (the frontier's
``context_tokens`` objective sees the saving) and its score says whether the weights took them in.
"""
from __future__ import annotations

import contextlib
import json
import math
import random
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from evolver import Message, Trainer, evaluate_many, summarize
from evolver_grpo.distill_config import DistillConfig, load
from evolver_training import Optimiser, RolloutBackend, make_engine, split_model
from evolver_transformers import use_autocast

DIVERGENCES = ("forward", "reverse", "jsd")


# ----------------------------------------------------------------------------------- the divergences
def token_divergence(student_logp: torch.Tensor, teacher_logp: torch.Tensor, kind: str,
                     beta: float = 0.5) -> torch.Tensor:
    """Per position, the divergence between two [N, V] log-probability rows (a [N] tensor):
    ``forward`` KL(T || S), ``reverse`` KL(S || T), ``jsd`` beta KL(T || M) + (1 - beta) KL(S || M) with
    M = beta T + (1 - beta) S (0.5: the symmetric Jensen-Shannon divergence). Gradients flow into
    whichever argument has them (the student's)."""
    if kind == "forward":
        return (teacher_logp.exp() * (teacher_logp - student_logp)).sum(-1)
    if kind == "reverse":
        return (student_logp.exp() * (student_logp - teacher_logp)).sum(-1)
    if kind == "jsd":
        log_m = torch.logsumexp(torch.stack([teacher_logp + math.log(beta), student_logp + math.log(1 - beta)]), 0)
        kl_t = (teacher_logp.exp() * (teacher_logp - log_m)).sum(-1)
        kl_s = (student_logp.exp() * (student_logp - log_m)).sum(-1)
        return beta * kl_t + (1 - beta) * kl_s
    raise ValueError(f"unknown divergence {kind!r}; choose from {', '.join(DIVERGENCES)}")


def completion_hidden(model, prompts: list[list[int]], completions: list[list[int]], share: int = 64) -> torch.Tensor:
    """The trunk's hidden states at the positions predicting each completion token, packed [Σ|c_i|, H]
    in sample order; samples sharing ``share`` prompt tokens run them once (``evolver_training.logprobs``)."""
    from evolver_training import completion_hidden as hidden

    return hidden(split_model(model)[0], prompts, completions, share=share)


def _chunk_divergence(student_h, teacher_h, head, kind, beta):
    s = F.log_softmax(head(student_h).float(), -1)
    with torch.no_grad():
        t = F.log_softmax(head(teacher_h).float(), -1)
    return token_divergence(s, t, kind, beta)


def distill_divergence(model, student_prompts, teacher_prompts, completions, *, kind: str = "reverse",
                       beta: float = 0.5, chunk: int = 256, share: int = 64, autocast=False) -> torch.Tensor:
    """Per completion token (packed, sample order), D(teacher || student) over the vocabulary, where the
    teacher is ``model`` on ``teacher_prompts`` without a graph and the student ``model`` on
    ``student_prompts``; both read the same ``completions``. Gradients reach the student side."""
    dev = next(model.parameters()).device
    ctx = torch.autocast(dev.type, dtype=torch.bfloat16) if use_autocast(autocast, dev) else contextlib.nullcontext()
    head = split_model(model)[1]
    with ctx:
        with torch.no_grad():
            teacher_h = completion_hidden(model, teacher_prompts, completions, share)
        student_h = completion_hidden(model, student_prompts, completions, share)
        out = [checkpoint(_chunk_divergence, student_h[s:s + chunk], teacher_h[s:s + chunk], head, kind, beta,
                          use_reentrant=False) if torch.is_grad_enabled() else
               _chunk_divergence(student_h[s:s + chunk], teacher_h[s:s + chunk], head, kind, beta)
               for s in range(0, len(student_h), chunk)]
    return torch.cat(out) if out else torch.zeros(0, device=dev)


# ----------------------------------------------------------------------------------- the teacher's context
class Privileged:
    """The teacher's prompt for a student's model call: the call's chat messages with the system message
    swapped for the teacher's, rendered by ``backend.chat_ids``.

    ``skills``: the teacher's system message is what the program's own harness writes with its skills, for
    the episode's first call of the same task (the program's harness started on the task's first
    observation; cached per task). That is exact for a harness whose system message is fixed for an
    episode, as the seed harness's is (prompt.md, the skill index, the injected bodies, the task's tools),
    and the history, observations and notes in the user turns stay the student's. (A skill's observer
    notes live in the user turn: the teacher does not see them.)
    ``gold`` / ``hint``: the student's system message plus the task's gold answer or hint."""

    def __init__(self, run, program, kind: str, backend):
        self.run, self.program, self.kind, self.backend = run, program, kind, backend
        self._system: dict[str, str | None] = {}
        self._harness = None

    def close(self) -> None:
        close = getattr(self._harness, "close", None)
        if close is not None:
            close()
        self._harness = None

    def text(self, task) -> str | None:
        """The privileged text of ``gold`` / ``hint`` for ``task`` (None: it has none)."""
        if self.kind == "gold":
            demo = self.run.benchmark.demonstration(task)
            gold = demo if demo else task.gold
            if gold is None or gold == "" or gold == []:
                return None
            if isinstance(gold, list) and all(isinstance(a, str) for a in gold):
                return "A correct way to solve this task (shown to you alone): " + " -> ".join(gold)
            shown = gold if isinstance(gold, str) else json.dumps(gold, default=str)
            return "The correct answer (shown to you alone): " + shown
        hint = (task.hints or {}).get("hint") or (task.meta or {}).get("hint")
        return f"Hint: {hint}" if isinstance(hint, str) and hint.strip() else None

    def skills_system(self, task) -> str | None:
        if task.id not in self._system:
            from evolver import Harnesses

            if self._harness is None:  # a candidate's harness is candidate code: sandboxed, as the evaluator runs it
                ctx, loop = self.run.context(self.program), self.run.config.loop
                packages = list(getattr(self.run.benchmark, "harness_packages", None) or ())
                self._harness = (Harnesses.Sandboxed(ctx, memory_mb=loop.harness_memory_mb, packages=packages)
                                 if loop.sandbox_harness else Harnesses.make(ctx))
            env = self.run.benchmark.env(task)
            try:
                obs = env.reset()
                hints = getattr(self.run.benchmark, "harness_hints", None)
                public_seed = getattr(self.run.benchmark, "public_seed", False)
                state = self._harness.start(Harnesses.task(task, hints, public_seed), obs)
                request = self._harness.next_call(state, obs)
            finally:
                env.close()
            msgs = request.messages if request is not None else []
            self._system[task.id] = next((m.content for m in msgs if m.role == "system"), None)
        return self._system[task.id]

    def teacher_ids(self, task, messages: list[dict]) -> list[int] | None:
        """Token ids of the teacher's prompt for a student call with ``messages``; None when the task has
        no privileged context (or it would change nothing)."""
        msgs = [Message(m["role"], m["content"]) for m in messages]
        has_system = bool(msgs) and msgs[0].role == "system"
        if self.kind == "skills":
            system = self.skills_system(task)
            if system is None:
                return None
        else:
            extra = self.text(task)
            if extra is None:
                return None
            system = (msgs[0].content.rstrip() + "\n\n" if has_system else "") + extra
        if has_system and system == msgs[0].content:
            return None
        teacher = [Message("system", system)] + (msgs[1:] if has_system else msgs)
        return list(self.backend.chat_ids(teacher))


# ----------------------------------------------------------------------------------- the trainer
class DistillTrainer(Trainer):
    #: ``evolver train --distill``: a variant one asks for, never the default trainer.
    flag = True
    _tmp = None  # the student's copy of the program without its skills (``privileged = "skills"``), while set up
    privileged = None  # what the teacher sees that the student does not (set up by :meth:`setup`)
    columns = ("div {divergence:.4f}", "score {score_mean:.3f}", "len {response_len:.1f}",
               "z {privileged_tokens:.0f} tok", "{step_s:.1f}s (rollout {rollout_s:.1f})")

    def __init__(self, run, options: dict | None = None, engine=None, progress=None):
        self.run = run
        self.cfg: DistillConfig = load(options if options is not None else run.config.plugins.get("distill", {}))
        self._engine = engine
        self.progress = progress or (lambda row: None)
        self.history: list[dict] = []

    @property
    def total_steps(self) -> int:  # Trainer.total_steps: what `evolver train`'s progress counts to
        return self.cfg.steps

    def setup(self) -> None:
        cfg, run = self.cfg, self.run
        torch.manual_seed(cfg.seed)
        self.rng = random.Random(cfg.seed)
        self.engine = self._engine or make_engine(run, cfg.engine)
        self.model = self.engine.learner()
        self.base_id = self.engine.backend.base_model
        if cfg.lora:
            from peft import LoraConfig, get_peft_model

            self.model = get_peft_model(self.model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
                                                               target_modules=cfg.lora_targets, lora_dropout=0.0))
        self.model.eval()  # no dropout: teacher and student must be the same function
        self.opt = Optimiser([p for p in self.model.parameters() if p.requires_grad], lr=cfg.lr,
                             weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm)
        self.program = run.repo.checkout(cfg.program)
        student, self._tmp = self.program, None
        if cfg.privileged == "skills":
            from evolver import EvolverError, variant

            if not run.context(self.program).skills:
                raise EvolverError(f"program {self.program.id} has no skills to distil: pick one that has "
                                   "(--program REF), or another privileged context (plugins.distill.privileged)")
            student, self._tmp = variant(self.program, "none", [])
        self.ctx = run.context(student)
        self.privileged = Privileged(run, self.program, cfg.privileged, self.engine.backend)
        self.tasks = run.benchmark.tasks(cfg.split, per_category=cfg.per_category)
        if not self.tasks:
            from evolver import EvolverError

            raise EvolverError(f"benchmark {run.config.benchmark} has no {cfg.split} tasks to train on")
        self._queue: list = []
        self.sampler = RolloutBackend(self.engine.backend, cfg.temperature, cfg.max_new_tokens, seed=cfg.seed)

    def _next_tasks(self, n: int) -> list:
        out = []
        while len(out) < n:
            if not self._queue:
                self._queue = list(self.tasks)
                self.rng.shuffle(self._queue)
            out.append(self._queue.pop())
        return out

    def rollout(self, step: int, tasks: list) -> list:
        """The student's episodes: every task ``samples_per_task`` times, each its own seed."""
        cfg = self.cfg
        base = step * 1000 * cfg.samples_per_task + cfg.seed * 7919
        self.sampler.reseed(base)
        jobs = [(self.ctx, tasks, base + g) for g in range(cfg.samples_per_task)]
        per_job = evaluate_many(jobs, self.run.benchmark, self.sampler, store=self.run.store, run=self.run,
                                purpose="distill", use_cache=False,
                                max_live=cfg.rollout_batch or cfg.samples_per_task * len(tasks))
        return [ep for eps in per_job for ep in eps]

    def samples(self, episodes) -> list[tuple[list[int], list[int], list[int]]]:
        """(student prompt ids, teacher prompt ids, completion ids) of every model call worth training on."""
        by_id = {t.id: t for t in self.tasks}
        window = getattr(self.engine.backend, "context_window", None) or float("inf")
        out = []
        for ep in episodes:
            task = by_id.get(ep.task.id, ep.task)  # the task with its gold (the episode's may lack it)
            for st in ep.steps:
                if not (st.sample and st.sample.get("completion_ids")):
                    continue
                completion = list(st.sample["completion_ids"])
                teacher = self.privileged.teacher_ids(task, json.loads(st.prompt))
                # a teacher prompt past the model's context window would read nonsense positions: skipped
                if teacher is not None and len(teacher) + len(completion) <= window:
                    out.append((list(st.sample["prompt_ids"]), teacher, completion))
        return out

    def divergence(self, batch, grad: bool = False) -> torch.Tensor:
        """Per-token divergences of ``batch`` (samples as :meth:`samples` gives them), packed."""
        cfg = self.cfg
        with contextlib.nullcontext() if grad else torch.no_grad():
            return distill_divergence(self.model, [b[0] for b in batch], [b[1] for b in batch], [b[2] for b in batch],
                                      kind=cfg.divergence, beta=cfg.jsd_beta, chunk=cfg.logprob_chunk,
                                      share=cfg.share_prefix, autocast=cfg.autocast)

    def update(self, batch) -> dict:
        """One optimizer step on the token-level mean divergence of ``batch``, micro-batched exactly."""
        cfg = self.cfg
        out = {"divergence": 0.0, "grad_norm": 0.0, "tokens": 0}
        tokens = sum(len(b[2]) for b in batch)
        if not tokens:
            return out
        batch = sorted(batch, key=lambda b: b[0])  # shared prompt prefixes side by side
        self.opt.begin()
        total = 0.0
        for i in range(0, len(batch), cfg.micro_batch):
            per_token = self.divergence(batch[i:i + cfg.micro_batch], grad=True)
            loss = per_token.sum() / tokens
            loss.backward()
            total += float(loss.detach())
        gn = self.opt.finish()
        self.opt.zero_grad(set_to_none=True)
        return {"divergence": total, "grad_norm": float(gn), "tokens": tokens}

    def step(self, step: int) -> dict:
        t0 = time.perf_counter()
        episodes = self.rollout(step, self._next_tasks(self.cfg.tasks_per_step))
        batch = self.samples(episodes)
        t_rollout = time.perf_counter() - t0
        t1 = time.perf_counter()
        metrics = self.update(batch)
        t_update = time.perf_counter() - t1
        t_sync = self.engine.sync(self.model, f"{self.base_id}+distill:{self.run.id}:{step + 1}")
        row = {"step": step + 1, **metrics, "samples": len(batch), "episodes": len(episodes),
               "score_mean": float(np.mean([e.score for e in episodes])) if episodes else 0.0,
               "errors": sum(1 for e in episodes if e.error),
               "response_len": float(np.mean([len(b[2]) for b in batch])) if batch else 0.0,
               # the prompt tokens the privileged context takes (what dropping the skills saves per call)
               "privileged_tokens": float(np.mean([len(b[1]) - len(b[0]) for b in batch])) if batch else 0.0,
               "rollout_s": t_rollout, "update_s": t_update, "sync_s": t_sync,
               "step_s": time.perf_counter() - t0}
        self.run.add_train_steps([row])
        self.history.append(row)
        self.progress(row)
        return row

    def evaluate(self):
        """The student program (greedy, its own harness: without the skills when they are the privileged
        context) on ``eval_split``."""
        cfg = self.cfg
        tasks = self.run.benchmark.tasks(cfg.eval_split, per_category=cfg.eval_per_category)
        eps = evaluate_many([(self.ctx, tasks)], self.run.benchmark, self.engine.backend, store=self.run.store,
                            run=self.run, purpose="distill-eval")[0]
        return summarize(self.ctx.program.id, cfg.eval_split, eps)

    def save(self, step: int) -> Path:
        """The weights as an HF folder in the workspace; returns it relative to the workspace."""
        from evolver_training import save_checkpoint as save

        rel = Path("checkpoints") / self.run.id / f"step-{step}"
        save(self.model, getattr(self.engine.backend, "tokenizer", None), self.run.workspace / rel)
        return rel

    def commit(self, rel: Path, evaluation: dict | None):
        cfg, run = self.cfg, self.run
        dropped = cfg.privileged == "skills" and cfg.drop_skills
        manifest = {"parent": self.program.id, "operator": "distill", "model": rel.as_posix(),
                    "proposal": f"self-distillation ({cfg.divergence}) with {cfg.privileged} as the teacher's "
                                f"context, {cfg.steps} steps" + (", skills dropped" if dropped else "")}
        last = self.history[-1] if self.history else {}
        message = (f"distill: {cfg.divergence}, privileged {cfg.privileged}, {cfg.steps} steps on "
                   f"{run.config.benchmark}\n\ndivergence {last.get('divergence', 0):.4f}"
                   + (f", {cfg.eval_split} score {evaluation['score']:.3f}" if evaluation else ""))
        return run.commit_child(self.program, f"distill-{run.id}-s{cfg.steps}", manifest, message,
                                edit=drop_skills if dropped else None)

    def train(self, resume: bool = False) -> dict:
        if resume:
            from evolver import EvolverError

            raise EvolverError("the distill trainer cannot resume a run: start it again (it is short)")
        self.setup()
        try:
            return self._train()
        finally:
            self.close()

    def close(self) -> None:
        """Stop the sandboxed harness that writes the teacher's prompts and remove the student's copy of
        the program without its skills (:meth:`train` does; a caller of :meth:`setup` alone calls this)."""
        if self.privileged is not None:
            self.privileged.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def _train(self) -> dict:
        cfg = self.cfg
        evals = [{"step": 0, **self.evaluate().metrics()}] if cfg.eval_per_category else []
        try:
            for step in range(cfg.steps):
                self.run.status = f"distill step {step + 1}/{cfg.steps}"
                self.step(step)
        finally:
            self.privileged.close()
        if cfg.eval_per_category:
            evals.append({"step": cfg.steps, **self.evaluate().metrics()})
        rel = self.save(cfg.steps)
        program = self.commit(rel, evals[-1] if evals else None) if cfg.commit else None
        return {"steps": cfg.steps, "history": self.history, "evals": evals,
                "program": program.id if program else None, "checkpoint": rel.as_posix()}


def drop_skills(root: Path) -> None:
    """Empty a program checkout's skills folder, leaving the ``.keep`` file a seed program has."""
    skills = Path(root) / "skills"
    shutil.rmtree(skills, ignore_errors=True)
    skills.mkdir()
    (skills / ".keep").write_text("")
