"""PPO with a learned critic: token-level advantages from a value function, from single rollouts.

The GRPO trainer's machinery (rollouts through the program's harness, exact token ids per model call,
chunked prefix-sharing forwards, the clipped objective, engine sync, checkpoints as program commits)
with the group estimator replaced by a critic. One step:

1. **Rollout.** ``tasks_per_step`` tasks, each played ``group_size`` times (1 is enough: nothing is
   compared within a group). Every model call is a sample, however many an episode makes and however
   long each is, so every sub-trace of a compacted long episode trains.
2. **Rewards.** The reward at the end of each call (:func:`evolver_grpo.gae.call_rewards`): the change
   of the episode's running score it brought, and the episode's end-only rewards on its last call.
3. **Values and GAE.** One forward of the rollout's policy gives each completion token's value (and,
   for ``mu > 1``, its old log-prob); GAE over each episode's calls chained into one trajectory
   (:mod:`evolver_grpo.gae`) gives token-level advantages and the critic's targets (the returns).
   Advantages are whitened over the batch's tokens (``whiten_advantages``).
4. **Update.** ``mu`` passes: the clipped policy loss with the token-level advantages (``objective``),
   plus ``vf_coef`` times the clipped value loss, minus ``entropy_coef`` times the entropy; the policy
   and the critic each have their optimizer (``lr``, ``critic_lr``) and gradient clipping.
5. **Sync.** As GRPO.

``train_steps`` rows hold GRPO's metrics plus ``value_loss``, ``explained_variance`` (of the rollout's
values against the returns, before the update), ``value_mean``, ``return_mean``, ``advantage_mean``
(before whitening), ``value_clip_frac`` and ``critic_grad_norm``. PPO runs in one process (not under
``torchrun``).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import numpy as np
import torch

from evolver import EvolverError
from evolver_grpo import advantages as adv_mod
from evolver_grpo.critic import Critic, completion_hidden, head_logprobs
from evolver_grpo.gae import call_rewards, episode_gae, explained_variance, whiten
from evolver_grpo.objective import policy_loss, token_weights
from evolver_grpo.ppo_config import PPOConfig, load
from evolver_grpo.samples import Sample
from evolver_grpo.trainer import GRPOTrainer
from evolver_training import Optimiser, Parallel, split_model


@dataclass
class PPOSample(Sample):
    reward: float = 0.0  # the environment's reward at the end of this model call


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, weights: torch.Tensor,
               clip: float | None) -> tuple[torch.Tensor, float]:
    """Σ_t w_t · ½ max((V_t - R_t)², (V_old + clip(V_t - V_old, ±c) - R_t)²) (PPO's clipped value loss;
    ``clip`` None: the plain squared error), and the weighted share of tokens where the clipped term won."""
    err = (values - returns) ** 2
    frac = 0.0
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        err_clipped = (clipped - returns) ** 2
        frac = float(((err_clipped > err).float() * weights).sum())
        err = torch.maximum(err, err_clipped)
    return 0.5 * (err * weights).sum(), frac


class PPOTrainer(GRPOTrainer):
    #: reward, the critic's value loss and explained variance, KL, clipping, length and time
    columns = ("reward {reward_mean:.3f}±{reward_std:.3f}", "vloss {value_loss:.4f}",
               "ev {explained_variance:.2f}", "kl {kl:.4f}", "clip {clip_frac:.3f}", "len {response_len:.1f}",
               "{step_s:.1f}s (rollout {rollout_s:.1f})")

    def __init__(self, run, options: dict | None = None, engine=None, progress=None):
        self.run = run
        self.cfg: PPOConfig = load(options if options is not None else run.config.plugins.get("ppo", {}))
        self._engine = engine
        self.progress = progress or (lambda row: None)
        self.history: list[dict] = []
        self.par = Parallel.from_env(self.cfg.parallel)
        if self.par.on:
            raise EvolverError("the PPO trainer runs in one process: start it without torchrun / accelerate")

    def setup(self) -> None:
        super().setup()
        cfg = self.cfg
        self.critic = Critic.build(cfg.critic, self.model, cfg.critic_model)
        self.critic_opt = Optimiser([p for p in self.critic.parameters() if p.requires_grad], lr=cfg.critic_lr,
                                    weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm)

    # ------------------------------------------------------------------------------- rollouts and rewards
    def _play(self, step: int) -> dict:
        cfg = self.cfg
        t0 = time.perf_counter()
        episodes, group_of = self.rollout(step, self._next_tasks(cfg.tasks_per_step))
        trajs, samples = self._collect(episodes, group_of)
        t_rollout = time.perf_counter() - t0
        train = self._with_rewards(episodes, trajs, samples)
        n_zero = len(adv_mod.zero_variance(trajs, self.acfg)) if cfg.group_size > 1 else 0
        return {"episodes": episodes, "trajs": trajs, "samples": samples, "train": train, "n_zero": n_zero,
                "n_groups": len(set(group_of)), "rollout_s": t_rollout}

    def _with_rewards(self, episodes, trajs, samples: list[Sample]) -> list[PPOSample]:
        """The samples, each with the reward at the end of its model call."""
        cfg = self.cfg
        out: list[PPOSample] = []
        for i, (ep, traj) in enumerate(zip(episodes, trajs)):
            mine = [s for s in samples if s.traj == i]
            blocked = {s.index for s in ep.steps if s.monitor and s.monitor.get("blocked")}
            # the calls samples.collect kept, in the same order
            calls = [s for s in ep.steps if s.sample and s.sample.get("completion_ids")
                     and not (cfg.monitor_flags == "mask" and s.index in blocked)]
            if len(calls) != len(mine):
                raise EvolverError(f"episode {i}: {len(calls)} model calls for {len(mine)} samples")
            rewards = call_rewards([c.reward for c in calls], adv_mod.total(traj, self.acfg), cfg.step_rewards)
            out += [PPOSample(**vars(s), reward=r) for s, r in zip(mine, rewards)]
        return out

    # ------------------------------------------------------------------------------- forwards
    def _forward(self, batch: list[Sample], grad: bool, entropy_grad: bool = False):
        """(log-probs, entropies, values) of the batch's completion tokens, packed in sample order."""
        cfg = self.cfg
        prompts, comps = [s.prompt_ids for s in batch], [s.completion_ids for s in batch]
        with contextlib.nullcontext() if grad else torch.no_grad():
            hidden = completion_hidden(split_model(self.model)[0], prompts, comps, share=cfg.share_prefix,
                                       autocast=cfg.autocast)
            lp, ent = head_logprobs(self.model, hidden, comps, chunk=cfg.logprob_chunk, autocast=cfg.autocast,
                                    entropy_grad=entropy_grad, masks=self._masks(batch))
            if self.critic.kind == "head":
                values = self.critic.values(hidden if cfg.critic_trunk_grad else hidden.detach())
            else:
                values = self.critic.values(prompts=prompts, completions=comps, share=cfg.share_prefix,
                                            autocast=cfg.autocast)
        return lp, ent, values

    def _advantages(self, train: list[PPOSample], values: dict[int, np.ndarray]):
        """Token-level (advantages, returns) per sample (by ``id``), GAE over each episode's calls."""
        cfg = self.cfg
        by_traj: dict[int, list[PPOSample]] = {}
        for s in train:
            by_traj.setdefault(s.traj, []).append(s)
        adv, ret = {}, {}
        for calls in by_traj.values():
            calls.sort(key=lambda s: s.step)
            parts = episode_gae([values[id(s)] for s in calls], [s.reward for s in calls], cfg.gamma, cfg.lam)
            for s, (a, r) in zip(calls, parts):
                adv[id(s)], ret[id(s)] = a, r
        return adv, ret

    # ------------------------------------------------------------------------------- the update
    def _update_batch(self, train: list[PPOSample]) -> dict:  # (GRPOTrainer._update releases the step's masks)
        cfg = self.cfg
        out = {"loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "ratio_mean": 1.0, "entropy": 0.0, "grad_norm": 0.0,
               "value_loss": 0.0, "explained_variance": 0.0, "value_mean": 0.0, "return_mean": 0.0,
               "advantage_mean": 0.0, "value_clip_frac": 0.0, "critic_grad_norm": 0.0,
               "logprob_s": 0.0, "update_s": 0.0}
        if not train:
            return out
        t0 = time.perf_counter()
        # shared prompt prefixes side by side, so a micro-batch runs each once (GAE regroups by episode)
        train = sorted(train, key=lambda s: s.prompt_ids) if cfg.share_prefix else list(train)
        mbs = [train[i:i + cfg.micro_batch] for i in range(0, len(train), cfg.micro_batch)]
        lengths = [len(s.completion_ids) for s in train]
        sizes = [sum(len(s.completion_ids) for s in mb) for mb in mbs]
        weights = list(torch.split(token_weights(lengths, cfg.loss, cfg.max_new_tokens or max(lengths)), sizes))
        vweights = list(torch.split(token_weights(lengths, "token"), sizes))  # the critic: a mean over tokens

        # the rollout policy's values (and log-probs when mu > 1: the ratio's denominator)
        old, old_v, ref = [None] * len(mbs), [], [None] * len(mbs)
        for k, mb in enumerate(mbs):
            lp, _, v = self._forward(mb, grad=False)
            old[k] = lp if cfg.mu > 1 else None
            old_v.append(v.float())
        if cfg.beta > 0:
            with self._ref_ctx():
                for k, mb in enumerate(mbs):
                    ref[k] = self._logprobs(self.ref if self.ref is not None else self.model, mb, grad=False)
        values = {}
        for mb, v in zip(mbs, old_v):
            for s, part in zip(mb, torch.split(v.cpu(), [len(s.completion_ids) for s in mb])):
                values[id(s)] = part.numpy().astype(np.float64)
        adv, ret = self._advantages(train, values)
        flat_v = np.concatenate([values[id(s)] for s in train])
        flat_a = np.concatenate([adv[id(s)] for s in train])
        flat_r = np.concatenate([ret[id(s)] for s in train])
        out.update(explained_variance=explained_variance(flat_v, flat_r), value_mean=float(flat_v.mean()),
                   return_mean=float(flat_r.mean()), advantage_mean=float(flat_a.mean()))
        if cfg.whiten_advantages:
            flat_a = whiten(flat_a)
        dev = old_v[0].device
        adv_mb = list(torch.split(torch.tensor(flat_a, dtype=torch.float32, device=dev), sizes))
        ret_mb = list(torch.split(torch.tensor(flat_r, dtype=torch.float32, device=dev), sizes))
        out["logprob_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        train_policy = len(self.history) >= cfg.critic_warmup  # the critic alone first, if asked
        keys = ("loss", "kl", "clip_frac", "ratio_mean", "entropy", "value_loss", "value_clip_frac")
        for it in range(cfg.mu):
            self.opt.begin()
            self.critic_opt.begin()
            agg = dict.fromkeys(keys, 0.0)
            for k, mb in enumerate(mbs):
                w, a = weights[k].to(dev), adv_mb[k]
                lp, ent, v = self._forward(mb, grad=True, entropy_grad=cfg.entropy_coef > 0)
                vl, vfrac = value_loss(v, old_v[k], ret_mb[k], vweights[k].to(dev), cfg.value_clip)
                loss = cfg.vf_coef * vl
                if train_policy:
                    old_lp = old[k] if old[k] is not None else lp.detach()
                    pg, st = policy_loss(lp, old_lp, a, w, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
                                         beta=cfg.beta, ref_logp=ref[k], kl_estimator=cfg.kl)
                    loss = loss + pg
                    if cfg.entropy_coef:
                        loss = loss - cfg.entropy_coef * (ent * w).sum()
                    agg["loss"] += float(pg.detach())
                    for key in ("kl", "clip_frac", "ratio_mean"):
                        agg[key] += st.get(key, 0.0)
                loss.backward()
                agg["entropy"] += float((ent.detach() * w).sum())
                agg["value_loss"] += float(vl.detach())
                agg["value_clip_frac"] += vfrac
            # (in a head's warm-up the trunk learns the values only)
            gn = self.opt.finish(step=train_policy or (self.critic.kind == "head" and cfg.critic_trunk_grad))
            cgn = self.critic_opt.finish()
            if it == 0:  # the first pass: the state the rollouts came from
                wsum = float(torch.cat(weights).sum()) or 1.0
                out.update(loss=agg["loss"], kl=agg["kl"] / wsum, clip_frac=agg["clip_frac"] / wsum,
                           ratio_mean=agg["ratio_mean"] / wsum if train_policy else 1.0,
                           entropy=agg["entropy"] / wsum, value_loss=agg["value_loss"],
                           value_clip_frac=agg["value_clip_frac"], grad_norm=float(gn), critic_grad_norm=float(cgn))
        self.opt.zero_grad(set_to_none=True)
        self.critic_opt.zero_grad(set_to_none=True)
        out["update_s"] = time.perf_counter() - t0
        return out

    # ------------------------------------------------------------------------------- resuming
    def resume_extra(self) -> dict:
        """The critic's weights and optimizer, saved with each checkpoint's trainer state."""
        return {"critic": self.critic.state_dict(), "critic_opt": self.critic_opt.state_dict()}

    def resume_from(self, folder, state: dict) -> int:
        start = super().resume_from(folder, state)
        extra = state.get("extra") or {}
        if "critic" in extra:
            self.critic.load_state_dict(extra["critic"])
            self.critic_opt.load_state_dict(extra["critic_opt"])
        return start
