"""SFT on demonstrated steps: teach the policy the actions of successful trajectories, each step's
prompt rendered by the program's own harness. Imitation, expert iteration and SKILLRL's cold-start SFT
(``evolver train --sft``, which seeds a skill bank first) are this trainer with their own data.

1. **Program.** The program whose harness renders the prompts (:meth:`SFTTrainer.prepare_program`;
   a subclass may commit something first, as SKILLRL's seeds a bank).
2. **Data.** Successful training trajectories (gold paths, and/or successful training episodes from
   the trace store) replayed through the program's harness: every step's prompt is exactly what the
   harness renders (its retrieved skills, history and observation format), and the target is the
   action as written text plus the end-of-turn token (write-the-action mode). Dev and test never
   contribute.
3. **Fine-tune.** Cross-entropy on the completion tokens (log-probs chunked, as in the GRPO trainer),
   AdamW, bf16 autocast where the hardware has it, mini-batches; every optimizer step's loss goes to ``train_steps``.
   Under ``torchrun`` (``evolver_training.parallel``) rank 0 builds the samples and hands them to the other
   ranks; each computes its share of a batch's micro-batches, and the gradients sum to the whole batch's.
4. **Checkpoint.** An HF folder under ``<workspace>/checkpoints/<run>/sft``, committed as a child
   program whose manifest ``model`` points at it (the GRPO trainer's format). With ``write_choice``
   (default), the program trained and committed chooses its actions by writing them (its own commit
   before training), so the evaluations and the commit play as the model was trained.
"""
from __future__ import annotations

import json
import random
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import torch

from evolver import Demos, Episode, EvolverError, Message, Trainer, evaluate_many, summarize
from evolver_training.checkpoint import latest_state, load_weights, save, write_state
from evolver_training.engines import learner_only, make_engine
from evolver_training.logprobs import completion_logprobs, prefix_groups
from evolver_training.optim import Optimiser, freeze_below
from evolver_training.options import SFTOptions, load_sft
from evolver_training.parallel import Parallel


@dataclass
class SFTSample:
    """One demonstrated step as token ids: the prompt the harness rendered, the action to learn (with
    the end-of-turn token), and where it came from."""

    prompt_ids: list[int]
    completion_ids: list[int]
    task_id: str
    episode: int = 0  # which trajectory it came from (``batch_by = "episode"``)


def samples_from(episodes: list[Episode], backend, max_prompt_tokens: int) -> tuple[list[SFTSample], int]:
    """One sample per model call of each episode; returns (samples, dropped for length)."""
    out, dropped = [], 0
    end = getattr(backend, "end_id", None)
    for n, ep in enumerate(episodes):
        for step in ep.steps:
            if not step.action or step.tool_calls:
                continue
            messages = [Message(**m) for m in json.loads(step.prompt)]
            prompt = backend.chat_ids(messages)
            completion = list(backend.tokenizer(step.action, add_special_tokens=False)["input_ids"])
            completion += [end] if end is not None else []
            if len(prompt) > max_prompt_tokens:
                dropped += 1
                continue
            out.append(SFTSample(prompt, completion, ep.task.id, n))
    return out, dropped


def micro_batches(batch: list[SFTSample], rows: int, share: int) -> list[list[SFTSample]]:
    """``batch`` cut into forwards. Samples sharing a prompt prefix of ``share`` tokens or more
    (``prefix_groups``) go together, as many as compute no more tokens than ``rows`` of the batch's
    longest samples (a shared prefix counts once); the others go ``rows`` at a time, by length
    (less padding)."""
    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in batch]
    groups = prefix_groups([s.prompt_ids for s in batch], lengths, share) if share > 0 else \
        [(0, [i]) for i in range(len(batch))]
    budget = rows * max(lengths, default=0)
    out: list[list[SFTSample]] = []
    for L, members in groups:
        if not L:
            continue
        used = budget + 1  # start a new forward with each group
        for i in members:
            cost = lengths[i] - (L if used <= budget and out[-1] else 0)
            if used + cost > budget:
                out.append([])
                used, cost = 0, lengths[i]
            out[-1].append(batch[i])
            used += cost
    alone = sorted((g[0] for L, g in groups if not L), key=lambda i: lengths[i])
    return out + [[batch[i] for i in alone[k:k + rows]] for k in range(0, len(alone), rows)]


class SFTTrainer(Trainer):
    """SFT: the program's harness renders demonstration steps (gold paths, good stored episodes, or
    ``episodes`` given), and the policy learns their actions. ``options`` are :class:`SFTOptions`
    (``options_model``, the ``[plugins.<section>]`` table)."""

    flag = True
    columns = ("loss {loss:.4f}", "{step_s:.1f}s")
    options_model: type[SFTOptions] = SFTOptions
    section = "sft"

    def __init__(self, run, options: dict | None = None, engine=None, progress=None,
                 episodes: list[Episode] | None = None):
        self.run = run
        raw = options if options is not None else run.config.plugins.get(self.section, {})
        self.cfg = load_sft(raw, self.options_model, self.section)
        self.given = episodes  # trajectories chosen by the caller (expert iteration), already rendered
        self._engine = engine
        self.progress = progress or (lambda row: None)
        self.history: list[dict] = []
        self.par = Parallel.from_env(self.cfg.parallel)  # one process unless launched by torchrun
        self.cfg = self.par.broadcast(self.cfg)  # rank 0's options (a resumed run's recorded ones) everywhere

    # ---------------------------------------------------------------------------------- data
    def prepare_program(self):
        """The program whose harness renders the prompts: ``program``, switched to choosing by writing
        when ``write_choice`` asks for it (a child commit)."""
        program = self.run.repo.checkout(self.cfg.program)
        return commit_write_choice(self.run, program) if self.cfg.write_choice else program

    def trajectories(self, program) -> list[Episode]:
        run, cfg = self.run, self.cfg
        if self.given is not None:
            return list(self.given)
        eps: list[Episode] = []
        if cfg.source in ("gold", "both"):
            tasks = demo_tasks(run.benchmark, cfg.first_task, cfg.per_category)
            eps += [e for e in Demos.replay_gold(run, program, tasks) if e.won and not e.error]
        if cfg.source in ("store", "both"):
            stored = [e for e in run.store.episodes(split="train", min_score=cfg.min_score, with_steps=True)
                      if e.purpose in ("train", "grpo") and not e.error]
            per: dict[str, int] = {}
            chosen = []
            for e in stored:  # at most per_category successful episodes per category
                if per.get(e.task.category, 0) < cfg.per_category:
                    per[e.task.category] = per.get(e.task.category, 0) + 1
                    chosen.append(e)
            eps += [e for e in Demos.replay_episodes(run, program, chosen) if e.score >= cfg.min_score and not e.error]
        if not eps:
            raise EvolverError(f"no successful training trajectories for SFT (source {cfg.source!r}): the benchmark "
                               f"{run.config.benchmark!r} may have no gold paths; try --set plugins.sft.source=store "
                               "after a run that played training episodes")
        return eps

    # ---------------------------------------------------------------------------------- train
    def setup(self, program_id: str | None = None) -> None:
        torch.manual_seed(self.cfg.seed)
        par = self.par
        if par.main:
            self.engine = self._engine or make_engine(self.run, self.cfg.engine)
            self.model = self.engine.learner()
            self.base_id = self.engine.backend.base_model
        else:  # another rank: only gradients; rank 0's weights arrive when the model is wrapped
            self.engine, self.model = None, learner_only(self.run, self.cfg.engine)
        self.model.eval()  # no dropout: the loss is over exactly the tokens the policy will produce
        freeze_below(self.model, self.cfg.train_layers)
        par.wrap(self.model)
        if par.main:
            # A resumed run trains on the program its first attempt prepared (committed only once).
            self.program = self.run.repo.checkout(program_id) if program_id else self.prepare_program()
            self.ctx = self.run.context(self.program)
            self.episodes = self.trajectories(self.program)
            self.samples, self.dropped = samples_from(self.episodes, self.engine.backend, self.cfg.max_prompt_tokens)
        self.samples = par.broadcast(self.samples if par.main else None)
        if not self.samples:
            raise EvolverError(f"every SFT sample was longer than max_prompt_tokens={self.cfg.max_prompt_tokens}; "
                               "raise it with --set plugins.sft.max_prompt_tokens=N")
        per_epoch = -(-len(self.samples) // self.cfg.batch_size)
        self.total_steps = min(self.cfg.steps or per_epoch * self.cfg.epochs, per_epoch * self.cfg.epochs)
        cfg = self.cfg
        self.opt = Optimiser(par.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm,
                             clip=par.clip_grad_norm, schedule=cfg.schedule, warmup=cfg.warmup, total=self.total_steps)

    def batches(self):
        rng = random.Random(self.cfg.seed)
        by_episode: dict[int, list[int]] = {}
        for j, s in enumerate(self.samples):
            by_episode.setdefault(s.episode, []).append(j)
        units = list(by_episode.values()) if self.cfg.batch_by == "episode" else [[j] for j in range(len(self.samples))]
        for _ in range(self.cfg.epochs):
            rng.shuffle(units)
            order = [j for unit in units for j in unit]
            for i in range(0, len(order), self.cfg.batch_size):
                yield [self.samples[j] for j in order[i:i + self.cfg.batch_size]]

    def step(self, n: int, batch: list[SFTSample]) -> dict:
        t0 = time.perf_counter()
        lr = self.opt.begin(n)
        # Token-level cross-entropy over the whole batch, accumulated over micro-batches of similar
        # length (less padding); each adds its share, so the gradient is the whole batch's. In parallel
        # each rank computes its share of the micro-batches (``total`` is still the whole batch's).
        total = sum(len(s.completion_ids) for s in batch)
        loss_sum = 0.0
        par, mbs = self.par, micro_batches(batch, self.cfg.micro_batch, self.cfg.share_prefix)
        plan = par.schedule(len(mbs))
        for j, (k, real) in enumerate(plan):
            with par.micro_step(last=j == len(plan) - 1):
                lp = par.forward(completion_logprobs, [s.prompt_ids for s in mbs[k]],
                                 [s.completion_ids for s in mbs[k]], chunk=self.cfg.logprob_chunk,
                                 autocast=self.cfg.autocast, share=self.cfg.share_prefix,
                                 detach_prompt=self.cfg.detach_prompt)
                loss = -lp.sum() / total
                par.backward(loss, real)
            loss_sum += float(loss.detach()) if real else 0.0
        loss_sum = par.sum([loss_sum])[0]
        gn = self.opt.finish()
        row = {"step": n, "loss": loss_sum, "grad_norm": float(gn), "lr": lr, "samples": len(batch), "tokens": total,
               "step_s": time.perf_counter() - t0, "trainer": "sft"}
        self.history.append(row)
        self.progress(row)
        return row

    def evaluate(self) -> dict:
        cfg = self.cfg
        tasks = self.run.benchmark.tasks(cfg.eval_split, per_category=cfg.eval_per_category)
        eps = evaluate_many([(self.ctx, tasks)], self.run.benchmark, self.engine.backend, store=self.run.store,
                            run=self.run, purpose="sft-eval")[0]
        ev = summarize(self.program.id, cfg.eval_split, eps)
        return {**ev.metrics(), "per_category": ev.per_category}

    def train(self, resume: bool = False) -> dict:
        """One pass (``epochs`` times) over the samples. ``resume=True`` goes on from the newest state
        this run kept (``save_every``): the same program, weights, optimizer, RNG and batch order."""
        par = self.par  # under torchrun rank 0 alone reads and writes the workspace; the others follow
        if resume and par.on and par.mode == "fsdp":
            raise EvolverError(f"resuming with plugins.{self.section}.parallel = 'fsdp' is not supported: resume with "
                               "'ddp'")
        found = latest_state(self.run.workspace, self.run.id, prefix="sft-step-") if resume and par.main else None
        if resume and par.main and found is None:
            raise EvolverError(f"run {self.run.id} kept no SFT state to resume from (plugins.{self.section}.save_every="
                               f"{self.cfg.save_every}): start it again")
        self.setup(found[1]["program"] if found else None)
        cfg, run = self.cfg, self.run
        evals = []
        n = par.broadcast(self._restore(*found) if found else 0)
        if n:
            par.sync_from_main(self.opt)
        if cfg.eval_per_category and not n:
            with par.full_params():
                evals += [{"step": 0, **self.evaluate()}] if par.main else []
        for i, batch in enumerate(self.batches()):
            if i < n:
                continue  # done before the run stopped: same seeded order, so skipping is exact
            if cfg.steps is not None and n >= cfg.steps:
                break
            n += 1
            run.status = f"sft step {n}"
            self.step(n, batch)
            if cfg.save_every and n % cfg.save_every == 0:
                with par.full_params():
                    if par.main:
                        self._save_state(n)
        with par.full_params():  # rank 0 evaluates and saves the whole weights; the others are done
            out = self._finish(n, evals) if par.main else {"steps": n, "history": self.history, "evals": [],
                                                            "program": None, "checkpoint": None}
        par.close()
        return out

    def _finish(self, n: int, evals: list[dict]) -> dict:
        """Rank 0 after the last step: metrics, the engine's weights, the last evaluation and the checkpoint."""
        cfg, run = self.cfg, self.run
        run.store.delete_train_steps(run.id, after=0)
        run.add_train_steps(self.history)  # the store and the on_train_step hook, once the steps are final
        self.engine.sync(self.model, f"{self.base_id}+sft:{run.id}:{n}")
        if cfg.eval_per_category:
            evals.append({"step": n, **self.evaluate()})
        out = {"steps": n, "history": self.history, "evals": evals, "samples": len(self.samples),
               "dropped": self.dropped, "trajectories": len(self.episodes), "bank_program": self.program.id}
        if not cfg.commit:
            rel = Path("checkpoints") / run.id / f"sft-step-{n}"
            save(self.model, getattr(self.engine.backend, "tokenizer", None), run.workspace / rel)
            return {**out, "checkpoint": rel.as_posix(), "program": None}
        program = commit_checkpoint(self, n, "sft", f"{self.describe()} on {len(self.samples)} skill-conditioned "
                                                   f"steps from {len(self.episodes)} trajectories, {n} steps")
        return {"steps": n, "history": self.history, "evals": evals, "samples": len(self.samples),
                "dropped": self.dropped, "trajectories": len(self.episodes), "program": program.id,
                "checkpoint": program.model, "bank_program": self.program.id}

    def describe(self) -> str:
        """What the commit message calls this training."""
        return "SFT"

    def _save_state(self, n: int) -> None:
        folder = self.run.workspace / "checkpoints" / self.run.id / f"sft-step-{n}"
        save(self.model, getattr(self.engine.backend, "tokenizer", None), folder)
        write_state(folder, {"step": n, "optimizer": self.opt.state_dict(), "torch_rng": torch.get_rng_state(),
                             "history": self.history, "program": self.program.id}, prefix="sft-step-")

    def _restore(self, folder: Path, state: dict) -> int:
        load_weights(self.model, folder)
        self.opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        self.history = list(state["history"])
        self.run.log(f"{self.section}: resuming run {self.run.id} after step {state['step']}")
        return int(state["step"])


def demo_tasks(benchmark, first: int, n: int) -> list:
    """Training tasks ``first .. first + n - 1`` of each category (a later slice brings new demonstrations)."""
    tasks = benchmark.tasks("train", per_category=first + n)
    seen: dict[str, int] = {}
    out = []
    for t in tasks:
        seen[t.category] = seen.get(t.category, 0) + 1
        if seen[t.category] > first:
            out.append(t)
    return out


def commit_checkpoint(trainer, step: int, operator: str, message: str):
    """Save the trainer's model as an HF folder and commit it as a child of ``trainer.program``."""
    run = trainer.run
    rel = Path("checkpoints") / run.id / f"{operator}-step-{step}"
    save(trainer.model, getattr(trainer.engine.backend, "tokenizer", None), run.workspace / rel)
    parent = trainer.program
    manifest = {"parent": parent.id, "operator": operator, "model": rel.as_posix(), "proposal": message[:200]}
    return run.commit_child(parent, f"{operator}-{run.id}-s{step}", manifest, f"{operator}: {message}")


_WRITE_CHOICE_RE = re.compile(r"^WRITE_CHOICE = (True|False)\b", re.M)


def commit_write_choice(run, program):
    """``program`` with its harness choosing by writing (``WRITE_CHOICE = True``), as a child commit;
    ``program`` itself when it already does, or when its harness has no such knob (an evolved harness
    decides for itself; logged)."""
    text = (Path(program.root) / "harness" / "harness.py").read_text()
    m = _WRITE_CHOICE_RE.search(text)
    if m is None or m.group(1) == "True":
        if m is None:
            run.log(f"SFT: program {program.id}'s harness has no WRITE_CHOICE knob: it keeps choosing its own way")
        return program
    cid = f"write-choice-{uuid.uuid4().hex[:8]}"
    # "model" is inherited by the commit itself; "bank" keeps `evolver skillrl show`'s growth chain going.
    manifest = {"parent": program.id, "operator": "write-choice", "proposal": cid,
                **({"bank": program.manifest["bank"]} if "bank" in program.manifest else {})}

    def switch(path: Path) -> None:
        (path / "harness" / "harness.py").write_text(text[:m.start(1)] + "True" + text[m.end(1):])
    child = run.commit_child(program, cid, manifest, "write-choice: choose actions by writing one and playing the "
                                                     "nearest valid action, as SFT trains the model to", switch)
    return run.repo.checkout(child.id)
