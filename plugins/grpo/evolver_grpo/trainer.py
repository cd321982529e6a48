"""The GRPO training loop: rollouts through the program's harness, advantages, clipped updates.

One step:
1. **Rollout.** ``tasks_per_step`` training tasks, each played ``group_size`` times by the program
   (its harness and skills) through the rollout engine, sampled at ``temperature``; every model
   call keeps its exact prompt ids, completion ids and log-probs (``Step.sample``). The episodes are
   ordinary episodes in the store (purpose ``grpo``), so their traces read like any other.
2. **Advantages.** Named rewards per episode, an estimator from the registry, one advantage per
   model call; zero-variance groups are counted (and with ``dynamic_sampling`` replaced).
3. **Log-probs.** Old log-probs (only when ``mu > 1`` or TACO needs them; at ``mu = 1`` the ratio's
   denominator is the current log-prob detached, so the first ratio is exactly 1) and reference
   log-probs (only when ``beta > 0``), by the learner, chunked.
4. **Update.** ``mu`` optimizer steps over the batch, micro-batched with exact accumulation.
5. **Sync.** The engine generates with the new weights; the backend's model id changes with them,
   so no cached episode of the old policy is ever reused.
Metrics per step go to the ``train_steps`` table; checkpoints are HF folders in the workspace,
each committed as a program whose manifest ``model`` points at it.

Under ``torchrun`` (``evolver_training.parallel``) rank 0 plays the rollouts, computes the advantages and
hands the batch to the other ranks; every rank computes its share of the micro-batches (3-4), and the
gradients sum to the whole batch's. Rank 0 alone writes to the workspace.
"""
from __future__ import annotations

import contextlib
import copy
import random
import shutil
import time

import numpy as np
import torch

from evolver import Trainer, evaluate_many, summarize
from evolver_grpo import advantages as adv_mod
from evolver_grpo.config import GRPOConfig, load
from evolver_grpo.objective import policy_loss, token_weights
from evolver_grpo.samples import Sample, collect
from evolver_training import Optimiser, Parallel, RolloutBackend, completion_logprobs, learner_only, make_engine


class GRPOTrainer(Trainer):
    """GRPO on the executor's policy (the module docstring gives one step); options are
    :class:`evolver_grpo.config.GRPOConfig`. Other trainers (SKILLRL's, PPO) build on its rollouts and updates."""

    #: What `evolver train` prints per step (Trainer.columns): reward, the share of zero-variance groups, KL,
    #: clipping, response length and the step's time.
    columns = ("reward {reward_mean:.3f}±{reward_std:.3f}", "zero-var {zero_var_frac:.2f}", "kl {kl:.4f}",
               "clip {clip_frac:.3f}", "len {response_len:.1f}", "{step_s:.1f}s (rollout {rollout_s:.1f})")

    _bare = None  # the rollouts' copy of the program without its skills (``skills = false``), while training

    def __init__(self, run, options: dict | None = None, engine=None, progress=None):
        self.run = run
        self.cfg: GRPOConfig = load(options if options is not None else run.config.plugins.get("grpo", {}))
        self._engine = engine
        self.progress = progress or (lambda row: None)
        self.history: list[dict] = []
        self.par = Parallel.from_env(self.cfg.parallel)  # one process unless launched by torchrun
        self.cfg = self.par.broadcast(self.cfg)  # rank 0's options (a resumed run's recorded ones) everywhere

    @property
    def total_steps(self) -> int:
        """The steps :meth:`train` runs (Trainer.total_steps: `evolver train`'s progress bar counts to it)."""
        return self.cfg.steps

    # ------------------------------------------------------------------------------- set-up
    def setup(self) -> None:
        cfg, run, par = self.cfg, self.run, self.par
        torch.manual_seed(cfg.seed)
        self.rng = random.Random(cfg.seed)
        if par.main:
            self.engine = self._engine or make_engine(run, cfg.engine)
            self.model = self.engine.learner()
            self.base_id = self.engine.backend.base_model
        else:  # another rank: only gradients; rank 0's weights arrive when the model is wrapped
            self.engine, self.model = None, learner_only(run, cfg.engine)
        if cfg.lora:
            from peft import LoraConfig, get_peft_model

            self.model = get_peft_model(self.model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
                                                               target_modules=cfg.lora_targets, lora_dropout=0.0))
        if cfg.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.model.eval()  # no dropout in rollouts or updates: ratios must be exact
        par.broadcast_weights(self.model)  # rank 0's on every rank, before the reference copies them
        self.ref = None
        if cfg.beta > 0 and not cfg.lora:  # LoRA's reference is the same model with adapters off
            self.ref = copy.deepcopy(self.model).requires_grad_(False)
        par.wrap(self.model)
        self.opt = Optimiser(par.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                             max_grad_norm=cfg.max_grad_norm, clip=par.clip_grad_norm)
        if par.main:
            self._setup_rollouts()

    def _setup_rollouts(self) -> None:
        """What playing the rollouts needs (rank 0's): the program, its tasks and the sampler."""
        cfg, run = self.cfg, self.run
        self.program = run.repo.checkout(cfg.program)
        program = self.program
        if not cfg.skills:
            from evolver import variant

            program, self._bare = variant(self.program, "none", [])  # removed when train() returns
        self.ctx = run.context(program)
        self.tasks = run.benchmark.tasks(cfg.split, per_category=cfg.per_category)
        if not self.tasks:
            from evolver import EvolverError

            raise EvolverError(f"benchmark {run.config.benchmark} has no {cfg.split} tasks to train on")
        self._queue: list = []
        self.sampler = RolloutBackend(self.engine.backend, cfg.temperature, cfg.max_new_tokens, seed=cfg.seed)
        self.acfg = adv_mod.AdvantageConfig(std_floor=cfg.std_floor, scale=cfg.scale_rewards,
                                            weights=dict(cfg.reward_weights), gd2po_mode=cfg.gd2po_mode,
                                            gd2po_tau=cfg.gd2po_tau, gigpo_omega=cfg.gigpo_omega,
                                            gigpo_gamma=cfg.gigpo_gamma)

    def _next_tasks(self, n: int) -> list:
        """Tasks in a shuffled cycle, so every training task comes up before any repeats."""
        out = []
        while len(out) < n:
            if not self._queue:
                self._queue = list(self.tasks)
                self.rng.shuffle(self._queue)
            out.append(self._queue.pop())
        return out

    # ------------------------------------------------------------------------------- rollout
    def rollout(self, step: int, tasks: list, attempt: int = 0):
        cfg = self.cfg
        if cfg.sampling == "tree":
            from evolver_grpo.tree import grow
            return grow(self, step, tasks, attempt)
        G = cfg.group_size
        base = (step * 1000 + attempt * 100) * G + cfg.seed * 7919
        self.sampler.reseed(base)
        jobs = [(self.ctx, tasks, base + g) for g in range(G)]
        # One lockstep for the whole step by default: the engine batches every live episode's call
        # (measured on an H200: waves of 32 gave 500-620 rollout tok/s where one batch of 128 gives more).
        live = cfg.rollout_batch or G * len(tasks)
        per_job = evaluate_many(jobs, self.run.benchmark, self.sampler, store=self.run.store, run=self.run,
                                purpose="grpo", use_cache=False, max_live=live)
        episodes, group_of = [], []
        for i, task in enumerate(tasks):
            for g in range(G):
                episodes.append(per_job[g][i])
                group_of.append(f"{step}:{attempt}:{task.id}")
        return episodes, group_of

    def _collect(self, episodes, group_of):
        cfg = self.cfg
        return collect(episodes, group_of, format_names=cfg.format_rewards, eos_ids=self.engine.eos_ids,
                       format_regex=cfg.format_regex, reward_names=cfg.rewards,
                       monitor_flags=cfg.monitor_flags, monitor_penalty=cfg.monitor_penalty)

    # ------------------------------------------------------------------------------- one step
    def step(self, step: int) -> dict:
        par = self.par
        t0 = time.perf_counter()
        with par.full_params():  # rank 0 plays with the whole weights (every rank enters under FSDP)
            played = self._play(step) if par.main else {}
        train = par.broadcast(played.get("train"))  # rank 0's batch, advantages set, on every rank
        metrics = self._update(train)
        with par.full_params():
            version = f"{self.base_id}+grpo:{self.run.id}:{step + 1}" if par.main else ""
            t_sync = self.engine.sync(self.model, version) if par.main else 0.0
        if not par.main:
            return metrics
        episodes, trajs, samples = played["episodes"], played["trajs"], played["samples"]
        n_zero, n_groups = played["n_zero"], played["n_groups"]
        # The reward of every rollout played: with dynamic sampling the groups kept for training are
        # the ones with a spread, and a step that kept none still played (and scored) its rollouts.
        every = played.get("rollouts", trajs)
        totals = np.array([adv_mod.total(t, self.acfg) for t in every]) if every else np.zeros(1)
        row = {"step": step + 1, "reward_mean": float(totals.mean()), "reward_std": float(totals.std()),
               "score_mean": float(np.mean([e.score for e in episodes])) if episodes else 0.0,
               "zero_var_frac": n_zero / max(n_groups, 1), "groups": n_groups, "episodes": len(episodes),
               "samples": len(samples), "trained_samples": len(train),
               "response_len": float(np.mean([len(s.completion_ids) for s in samples])) if samples else 0.0,
               "errors": sum(1 for e in episodes if e.error),
               "monitor_blocked": sum(1 for e in episodes for st in e.steps if st.monitor and st.monitor.get("blocked")),
               "rewards": {k: float(np.mean([t.rewards.get(k, 0.0) for t in trajs]))
                           for k in adv_mod.reward_names(trajs)},
               **metrics, "rollout_s": played["rollout_s"], "sync_s": t_sync,
               **(getattr(self, "tree_stats", {}) if self.cfg.sampling == "tree" else {})}
        row["step_s"] = time.perf_counter() - t0
        self.run.add_train_steps([row])
        self.history.append(row)
        self.progress(row)
        return row

    def _play(self, step: int) -> dict:
        """Steps 1-2 (rank 0): the rollouts, their samples and advantages, and the samples to train on."""
        cfg = self.cfg
        t0 = time.perf_counter()
        episodes, group_of = self.rollout(step, self._next_tasks(cfg.tasks_per_step))
        trajs, samples = self._collect(episodes, group_of)
        rollouts = list(trajs)  # every rollout, kept or replaced: what the step's reward says
        zero = adv_mod.zero_variance(trajs, self.acfg)
        n_groups, n_zero = len(set(group_of)), len(zero)
        if cfg.dynamic_sampling and zero:
            # DAPO's dynamic sampling: groups with no reward spread teach nothing; replace them.
            keep = [i for i, g in enumerate(group_of) if g not in zero]
            episodes, group_of = [episodes[i] for i in keep], [group_of[i] for i in keep]
            for attempt in range(1, cfg.max_resample_rounds + 1):
                missing = cfg.tasks_per_step - len(set(group_of))
                if missing <= 0:
                    break
                more_eps, more_groups = self.rollout(step, self._next_tasks(missing), attempt)
                more_trajs, _ = self._collect(more_eps, more_groups)
                rollouts += more_trajs
                bad = set(adv_mod.zero_variance(more_trajs, self.acfg))
                for e, g in zip(more_eps, more_groups):
                    if g not in bad:
                        episodes.append(e)
                        group_of.append(g)
                n_groups += len(set(more_groups))
                n_zero += len(bad)
            trajs, samples = self._collect(episodes, group_of)
        t_rollout = time.perf_counter() - t0

        advs = adv_mod.estimate(cfg.estimator, trajs, self.acfg)
        for s in samples:
            s.advantage = float(advs[s.traj][s.step])
        # Without KL a zero-advantage sample has zero gradient: skip its compute.
        train = samples if cfg.beta > 0 else [s for s in samples if abs(s.advantage) > 1e-12]
        return {"episodes": episodes, "trajs": trajs, "samples": samples, "train": train, "n_zero": n_zero,
                "n_groups": n_groups, "rollout_s": t_rollout, "rollouts": rollouts}

    def _ref_ctx(self):
        return self.model.disable_adapter() if self.cfg.lora else contextlib.nullcontext()

    def _logprobs(self, model, batch: list[Sample], grad: bool, entropy: bool = False):
        ctx = contextlib.nullcontext() if grad else torch.no_grad()
        # the learner through the parallel wrapper (DDP syncs what runs in it; FSDP gathers the weights)
        call = self.par.forward if model is self.model else (lambda fn, *a, **kw: fn(model, *a, **kw))
        masks = self._masks(batch)
        with ctx:
            return call(completion_logprobs, [s.prompt_ids for s in batch], [s.completion_ids for s in batch],
                        chunk=self.cfg.logprob_chunk, autocast=self.cfg.autocast,
                        with_entropy=entropy, share=self.cfg.share_prefix, masks=masks)

    def _masks(self, batch: list[Sample]):
        """Per sample, the masks its reply was decoded under (a tool call's grammar), else None: the mask is
        part of the policy, so old, new and reference log-probs are all of the masked distribution. Built
        once per sample (llguidance replays the grammar over the reply) and kept for the step."""
        if not any(s.grammar for s in batch):
            return None
        memo = self.__dict__.setdefault("_mask_memo", {})
        todo = [s for s in batch if s.grammar and id(s) not in memo]
        if todo:
            from evolver import EvolverError
            from evolver_transformers import replay_masks

            if self.engine is None:  # a data-parallel rank with no engine has no tokenizer to replay them with
                raise EvolverError("tool-call rollouts (decoded under a grammar) train on one process for now; "
                                   "run GRPO without data parallelism for a benchmark with tools")
            backend = self.engine.backend
            vocab = int(self.model.get_output_embeddings().weight.shape[0])
            for s, m in zip(todo, replay_masks(backend.tokenizer, vocab, self.engine.eos_ids,
                                               [s.grammar for s in todo], [s.completion_ids for s in todo])):
                memo[id(s)] = (s, m)  # the sample itself is kept, so its id is not reused while memoised
        return [memo[id(s)][1] if s.grammar else None for s in batch]

    def _update(self, train: list[Sample]) -> dict:
        try:
            return self._update_batch(train)
        finally:
            self.__dict__.pop("_mask_memo", None)  # the step's masks: [len, vocab] each, not kept past it

    def _update_batch(self, train: list[Sample]) -> dict:
        cfg = self.cfg
        out = {"loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "ratio_mean": 1.0, "entropy": 0.0, "grad_norm": 0.0,
               "logprob_s": 0.0, "update_s": 0.0}
        if not train:
            return out
        # Shared prompt prefixes side by side (a group's rollouts, an episode's steps), so a
        # micro-batch runs each once; the loss is a sum over tokens, so the order changes nothing.
        train = sorted(train, key=lambda s: s.prompt_ids) if cfg.share_prefix else train
        mbs = [train[i:i + cfg.micro_batch] for i in range(0, len(train), cfg.micro_batch)]
        lengths = [len(s.completion_ids) for s in train]
        weights = token_weights(lengths, cfg.loss, cfg.max_new_tokens or max(lengths))
        wsplit = list(torch.split(weights, [sum(len(s.completion_ids) for s in mb) for mb in mbs]))
        adv_tok = [torch.cat([torch.full((len(s.completion_ids),), s.advantage) for s in mb]) for mb in mbs]
        t0 = time.perf_counter()
        token_level = cfg.estimator in adv_mod.TOKEN_LEVEL  # needs the old policy's entropies too
        # In parallel every rank holds the whole batch (so the weights are the whole batch's) and
        # computes its share of the micro-batches; one process computes them all.
        plan = self.par.schedule(len(mbs))
        old, old_ent, ref = [None] * len(mbs), [None] * len(mbs), [None] * len(mbs)
        if cfg.mu > 1 or token_level:
            for k, _ in plan:
                if token_level:
                    old[k], old_ent[k] = self._logprobs(self.model, mbs[k], grad=False, entropy=True)
                else:
                    old[k] = self._logprobs(self.model, mbs[k], grad=False)
        if cfg.beta > 0:
            with self._ref_ctx():
                for k, _ in plan:
                    ref[k] = self._logprobs(self.ref if self.ref is not None else self.model, mbs[k], grad=False)
        out["logprob_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        wsum = float(weights.sum()) or 1.0
        keys = ("loss", "kl", "clip_frac", "ratio_mean", "entropy")
        for it in range(cfg.mu):
            self.opt.begin()
            agg = dict.fromkeys(keys, 0.0)
            for j, (k, real) in enumerate(plan):
                with self.par.micro_step(last=j == len(plan) - 1):
                    lp, ent = self._logprobs(self.model, mbs[k], grad=True, entropy=True)
                    old_lp = old[k] if old[k] is not None else lp.detach()
                    a = adv_tok[k].to(lp.device)
                    if token_level:
                        a = adv_mod.taco_token_weights(old_lp, old_ent[k], a, cfg.taco_alpha, cfg.taco_lambda)
                    loss, st = policy_loss(lp, old_lp, a, wsplit[k].to(lp.device), eps_low=cfg.eps_low,
                                           eps_high=cfg.eps_high, beta=cfg.beta, ref_logp=ref[k],
                                           kl_estimator=cfg.kl)
                    self.par.backward(loss, real)
                if not real:
                    continue  # a repeat that keeps the ranks' collectives in step: it counts 0
                agg["loss"] += float(loss.detach())
                for key in ("kl", "clip_frac", "ratio_mean"):
                    agg[key] += st.get(key, 0.0)
                agg["entropy"] += float((ent * wsplit[k].to(ent.device)).sum())
            agg = dict(zip(keys, self.par.sum([agg[key] for key in keys])))
            gn = self.opt.finish()
            if it == 0:  # report the first pass: the state the rollouts came from
                out.update(loss=agg["loss"], kl=agg["kl"] / wsum, clip_frac=agg["clip_frac"] / wsum,
                           ratio_mean=agg["ratio_mean"] / wsum, entropy=agg["entropy"] / wsum, grad_norm=float(gn))
        self.opt.zero_grad(set_to_none=True)
        out["update_s"] = time.perf_counter() - t0
        return out

    # ------------------------------------------------------------------------------- evaluate
    def evaluate(self, split: str | None = None, per_category: int | None = None):
        """The current policy (greedy, the program's own harness) on a held-out split."""
        cfg = self.cfg
        tasks = self.run.benchmark.tasks(split or cfg.eval_split, per_category=per_category or cfg.eval_per_category)
        eps = evaluate_many([(self.ctx, tasks)], self.run.benchmark, self.engine.backend, store=self.run.store,
                            run=self.run, purpose="grpo-eval")[0]
        return summarize(self.ctx.program.id, split or cfg.eval_split, eps)

    # ------------------------------------------------------------------------------- the loop
    def resume_from(self, folder, state: dict) -> int:
        """Load a saved checkpoint (weights, optimizer, RNG, task queue) into the set-up trainer, forget
        the steps the stopped run recorded after it, and return its step."""
        from evolver_training import restore

        start = restore(self, folder, state)
        self.run.store.delete_train_steps(self.run.id, after=start)
        self.engine.sync(self.model, f"{self.base_id}+grpo:{self.run.id}:{start}")
        return start

    def train(self, resume: bool = False) -> dict:
        """Train ``steps`` steps. ``resume=True`` continues this run from its newest checkpoint
        (``save_every`` sets how often one is written): weights, optimizer, RNG and task queue, so
        the remaining steps play the tasks and seeds they would have played."""
        par = self.par  # under torchrun rank 0 alone reads and writes the workspace; the others follow
        if resume and par.on and par.mode == "fsdp":
            from evolver import EvolverError

            raise EvolverError("resuming with plugins.grpo.parallel = 'fsdp' is not supported: resume with 'ddp'")
        try:
            return self._train(resume)
        finally:
            self.close()

    def close(self) -> None:
        """Remove the rollouts' copy of the program without its skills (:meth:`train` does; a caller of
        :meth:`setup` alone calls this)."""
        if self._bare is not None:
            shutil.rmtree(self._bare, ignore_errors=True)
            self._bare = None

    def _train(self, resume: bool) -> dict:
        from evolver_training import latest_state, save_and_commit, save_step

        par = self.par
        self.setup()
        cfg = self.cfg
        evals, start = [], 0
        found = latest_state(self.run.workspace, self.run.id) if resume and par.main else None
        if found:
            start = self.resume_from(*found)
        start = par.broadcast(start)
        if start:
            par.sync_from_main(self.opt)
        if cfg.eval_per_category and not start:
            with par.full_params():
                evals += [{"step": 0, **self.evaluate().metrics()}] if par.main else []
        program, checkpoint = None, None
        began, done = time.monotonic(), start
        for step in range(start, cfg.steps):
            self.run.status = f"grpo step {step + 1}/{cfg.steps}"
            self.step(step)
            done = step + 1
            spent = time.monotonic() - began
            out_of_time = par.broadcast(bool(cfg.max_wall_s) and spent * (done - start + 1) / (done - start)
                                        > cfg.max_wall_s)
            last = done == cfg.steps or out_of_time
            evaluate = cfg.eval_per_category and ((cfg.eval_every and (step + 1) % cfg.eval_every == 0) or last)
            save = last or (cfg.save_every and (step + 1) % cfg.save_every == 0)
            if not (evaluate or save):
                continue
            with par.full_params():  # rank 0 evaluates and saves the whole weights
                if not par.main:
                    continue
                if evaluate:
                    evals.append({"step": step + 1, **self.evaluate().metrics()})
                if save and cfg.commit:
                    program = save_and_commit(self, step + 1, evals[-1] if evals else None)
                    checkpoint = program.model
                elif save:
                    checkpoint = save_step(self, step + 1).as_posix()
            if out_of_time:
                break
        par.close()
        return {"steps": done, "resumed_from": start, "history": self.history, "evals": evals,
                "program": program.id if program else None, "checkpoint": checkpoint}
