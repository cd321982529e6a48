"""``skill-miner``: a skill of data mined from the store, and a policy taught to follow its notes.

Each round it reads every training episode of the run in the store (the policy's rollouts, expert
iteration's samples, imitation's replayed demonstrations) plus, where the benchmark offers them,
demonstrations of ``demos_per_category`` more training tasks per category played in their
environments (else, with nothing to imitate, ``explore_per_category`` training tasks per category
played at random: rewards alone; left unset, each is a floor a category and a total, so a benchmark
with one category mines as much as one with six), turns their steps into cases (:mod:`evolver_experience.mining`),
merges them with the cases the parent's copy of the skill held, and writes the skill into the
candidate. The skill grows down a lineage, one commit per version (``evolver skills history
mined-moves``).

The candidate's harness plays the move a note names without asking the model (``follow_notes``);
where the notes say nothing the parent's policy decides. Teaching the policy the notes as well is
opt-in (``train``): the parent's policy fine-tuned on demonstrations of training tasks replayed
through the candidate's own harness, notes included; where the benchmark offers no demonstrations
(or the run uses none: ``demonstrations = false``), on its own best sampled rollouts (expert
iteration: played first, so they are mined too, then re-rendered with the notes in their prompts).
Then the following candidate is a twin beside the trained one. The loop gates every candidate like
any other.
"""
from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from evolver import Demos, Program, ProgramRepo
from evolver_experience import mining
from evolver_experience.expert import ExpertIterationProposer
from evolver_experience.imitation import SFT_DEFAULTS, ImitationOptions, plan_demos, planned_tasks
from evolver_experience.train import describe, lineage, split_options, train_from

OPERATOR = "mine-skill"
FOLLOWING = "the harness plays the move a note names (FOLLOW_NOTES)"
_FOLLOW_RE = re.compile(r"^FOLLOW_NOTES = (True|False)\b", re.M)


class SkillMinerOptions(ImitationOptions):
    skill: str = "mined-moves"
    """Name of the mined skill (one per program; a later round replaces it with a grown copy)."""
    demos_per_category: int | None = Field(None, ge=0)
    """Demonstrations of training tasks per category played for mining each round (their environments
    only: no model, milliseconds a game); 0 mines the store's episodes alone. Unset: 36 a category and
    at least 216 in all (:func:`spread`). Notes alone scored 0.60 on twx-easy dev from 12 a game and 0.66
    from 36; more did not help (``bench/mined_notes.py``)."""
    train: Literal["auto", "imitation", "expert-iteration", "none"] = "none"
    """How the policy learns to follow the new skill's notes: ``imitation`` of demonstrations replayed
    with them (the imitation options ``per_category``, ``focus`` and the SFT keys apply);
    ``expert-iteration`` on its own best sampled rollouts with them (the ``expert`` options); ``auto``
    imitation where the benchmark demonstrates the tasks, else expert iteration (rewards alone);
    ``none`` (the default): the skill alone, which the harness follows (``follow_notes``), on the
    parent's weights. Training beside following measured no better on twx-easy test (0.519 trained vs
    0.526 untrained, both following) and took a quarter of the run; the time goes to more rounds of
    mining instead."""
    explore_per_category: int | None = Field(None, ge=0)
    """Where a round has no demonstrations to mine (the benchmark offers none, or the run uses none:
    ``demonstrations = false``), training tasks per category played by picking valid actions at random
    (their environments only: no model, milliseconds a game) and mined for their rewards; 0: none.
    Unset: 60 a category and at least 360 in all (:func:`spread`): Blackjack's notes alone play 0.29 from
    60 hands and 0.38 from 360 (a random player 0.31)."""
    explore_sweeps: int = Field(3, ge=1)
    """Passes over those tasks; each after the first plays the move the notes mined so far name (with
    probability ``1 - explore_epsilon``, else a random one), so it reaches rewards that random play
    reaches only by luck."""
    explore_epsilon: float = Field(0.3, ge=0.0, le=1.0)
    explore_wall_s: float = Field(300.0, gt=0)
    """Seconds a round's exploration may take: no task starts after them (a slow simulator explores
    fewer tasks, not for hours). twx's 1,080 episodes take ~35 s on 2 cores."""
    price_wall_s: float = Field(60.0, gt=0)
    """Seconds the trial that prices the first candidate before the search may take (:meth:`price`): no
    task starts after them. On twx the whole price, mining included, takes ~6 s on 2 cores."""
    expert: dict[str, Any] = Field(default_factory=dict)
    """Options of the expert iteration (``[plugins.expert-iteration]``'s keys, SFT keys included)."""
    max_rounds: int = 3
    """Mining rounds down one lineage."""
    follow_notes: bool = True
    """The candidate's harness plays the move a note names without asking the model (the default
    harness's ``FOLLOW_NOTES``), where the parent's harness has that switch off. With training, that is
    a twin beside the trained candidate (when the proposer may offer two; a third, room allowing, with
    the parent's weights), and the gate decides which plays better."""


DEMOS = (36, 216)  # demonstrations a round, unset: per category and at least in all
EXPLORE = (60, 360)  # explored tasks a round, the same
TRIAL = (12, 72)  # training tasks a category, and at least in all, that price() plays the first notes on


def spread(per_category: int | None, floor: int, total: int, categories: int) -> int:
    """Tasks a category: ``per_category`` where set, else ``floor`` and at least ``total`` in all."""
    if per_category is not None:
        return per_category
    return max(floor, -(-total // max(1, categories)))


class SkillMinerProposer:
    needs_failures = False  # mines the run's stored episodes and demonstrations, not one batch's failures

    def __init__(self, run, **options):
        self.run = run
        self.cfg, self.sft = split_options(SkillMinerOptions, options, "skill-miner", SFT_DEFAULTS)
        # One candidate a call: the skill alone; trained, up to three (the trained one and its twins).
        self.drafts = 1 if self.cfg.train == "none" else 3
        self.expert = ExpertIterationProposer(run, **self.cfg.expert)  # fails at start-up on a bad option
        self._unguided: dict[int, tuple[list, list]] = {}  # slices mined by price(), for the round that builds

    def demonstrations(self, rounds: int) -> list:
        """Demonstrated episodes of mining slice ``rounds`` (task ``rounds * n`` onwards per category)."""
        n = spread(self.cfg.demos_per_category, *DEMOS, len(self.run.benchmark.categories))
        if not n:
            return []
        tasks = planned_tasks(self.run, {c: [rounds * n, n] for c in self.run.benchmark.categories})
        return mining.demonstrated(self.run.benchmark, tasks)

    def exploration(self, rounds: int, guide: list) -> list:
        """Played episodes of exploring slice ``rounds`` (task ``rounds * n`` onwards per category):
        ``explore_sweeps`` passes, the first guided by ``guide`` (the parent's cases) when it has any,
        else at random, each later one by the cases found so far."""
        cfg = self.cfg
        n = spread(cfg.explore_per_category, *EXPLORE, len(self.run.benchmark.categories))
        if not n:
            return []
        self.run.status = f"skill-miner explores {n} training tasks per category, {cfg.explore_sweeps} sweeps"
        tasks = planned_tasks(self.run, {c: [rounds * n, n] for c in self.run.benchmark.categories})
        began = time.monotonic()
        eps = mining.explored_sweeps(self.run.benchmark, tasks, cfg.explore_sweeps, seed=rounds, guide=guide,
                                     epsilon=cfg.explore_epsilon, deadline=began + cfg.explore_wall_s)
        if time.monotonic() - began >= cfg.explore_wall_s:
            self.run.log(f"skill-miner: exploring stopped at its {cfg.explore_wall_s:.0f} s (explore_wall_s): "
                         f"{len(eps)} episodes of the {len(tasks) * cfg.explore_sweeps} planned")
        return eps

    def material(self, fresh: int, had: list) -> tuple[list, list]:
        """(demonstrations, explored episodes) of mining slice ``fresh``; explored only without
        demonstrations (rewards alone: what pays where, no model), guided by ``had``. A slice mined for
        :meth:`price` from no earlier cases is kept, so the round that builds from it plays it once."""
        if not had and fresh in self._unguided:
            return self._unguided.pop(fresh)
        demos = self.demonstrations(fresh)
        return demos, ([] if demos else self.exploration(fresh, had))

    def price(self, seed: Program, pilot: list) -> float | None:
        """What the first candidate will cost an episode against ``seed`` (tokens), measured before the
        search: the notes of mining slice 0 and the ``pilot`` (the seed's first rollouts, with steps)
        followed through the next training tasks with no model (:func:`mining.trial`; where they are
        silent, the seed's moves in the pilot, by how often it chose each, stand in); each move the
        notes leave open is priced at the seed's tokens a model call, a task that lists no valid actions
        at the seed's tokens an episode. None where the candidate would not follow notes (it is
        trained, or the harness has no ``FOLLOW_NOTES``) or where there is nothing to price by."""
        cfg, run = self.cfg, self.run
        if cfg.train != "none" or not cfg.follow_notes or _following(Path(seed.root)) is None:
            return None
        calls = [s for e in pilot for s in e.steps if (s.prompt_tokens or 0) + (s.completion_tokens or 0) > 0]
        per_episode = sum((e.prompt_tokens or 0) + (e.completion_tokens or 0) for e in pilot) / max(1, len(pilot))
        if not calls or per_episode <= 0:
            return None
        per_call = sum(s.prompt_tokens + s.completion_tokens for s in calls) / len(calls)
        had = mining.read_cases(Path(seed.root) / "skills" / cfg.skill)
        demos, explored = ([], []) if had else self.material(0, [])
        if not had:
            self._unguided[0] = (demos, explored)
        cases = mining.merge(had, mining.mine([e for e in pilot if not e.error and e.task.split == "train"]
                                              + demos + explored, run.benchmark))
        if not cases:
            return None
        # Tasks past slice 0 (demonstrated or explored): none was mined, as no dev task is.
        categories = run.benchmark.categories
        first = max(spread(cfg.demos_per_category, *DEMOS, len(categories)),
                    spread(cfg.explore_per_category, *EXPLORE, len(categories)))
        tasks = planned_tasks(run, {c: [first, spread(None, *TRIAL, len(categories))] for c in categories})
        # Where the notes are silent the parent's policy decides: the trial's stand-in plays its habits.
        played = mining.trial(run.benchmark, tasks, cases, habits=Counter(s.action for s in calls if s.action),
                              deadline=time.monotonic() + cfg.price_wall_s)
        if not played:
            return None
        tokens = [per_episode if p is None else p[0] * per_call for p in played]
        ratio = sum(tokens) / len(tokens) / per_episode
        moves = [p for p in played if p is not None]
        run.log(f"skill-miner: its first notes ({len(cases)} cases) left {sum(a for a, _ in moves)} of "
                f"{sum(m for _, m in moves)} moves to the model on {len(played)} training tasks it had not "
                f"mined{f' ({len(played) - len(moves)} list no valid actions)' if len(moves) < len(played) else ''}: "
                f"its candidate priced at {ratio:.2f}x the seed's tokens an episode")
        return ratio

    def propose(self, ctx) -> list:
        run, cfg, parent = self.run, self.cfg, ctx.parent
        if ctx.iteration % max(1, cfg.every):
            return []
        ancestors = lineage(run, parent.id)
        rounds = sum(m.get("operator") == OPERATOR for m in ancestors)
        if rounds >= cfg.max_rounds:
            run.log(f"skill-miner: {parent.id} has had {rounds} rounds (max_rounds {cfg.max_rounds})")
            return []
        plan = plan_demos(run, cfg, parent, ancestors) if cfg.train in ("auto", "imitation") else {}
        tasks = planned_tasks(run, plan) if plan else []  # what imitation would take
        teach = self.teaching(tasks)
        # Rewards alone (nothing to imitate): the parent practises first, so its rollouts are mined too.
        practised = self.expert.rollouts(ctx) if teach == "expert-iteration" else None
        run.status = f"iteration {ctx.iteration}: skill-miner reads the store"
        stored = [e for e in run.store.episodes(run_id=run.id, split="train", with_steps=True) if not e.error]
        # Each round of the run mines a fresh slice of training tasks: a parent expanded again (its
        # first child was not admitted) gets other demonstrations, not the same candidate twice.
        fresh = len({p["iteration"] for p in getattr(ctx, "history", None) or [] if p.get("operator") == OPERATOR})
        had = mining.read_cases(Path(parent.root) / "skills" / cfg.skill)
        demos, explored = self.material(fresh, had)
        new = mining.mine(stored + demos + explored, run.benchmark)
        cases = mining.merge(had, new)
        if not new and not had:
            # Exploring picks valid actions at random: a task that lists none (a free-text reply) plays nothing.
            blind = not demos and not explored and cfg.explore_per_category != 0
            offered = ("the run uses none of the benchmark's demonstrations (demonstrations = false)"
                       if getattr(getattr(run, "config", None), "demonstrations", True) is False else
                       "the benchmark offered no demonstrations (a training task's gold as a list of actions, "
                       "or its `demonstration` method)")
            run.log(f"skill-miner: nothing to mine: none of the {len(stored)} training episodes in the store "
                    f"or the {len(explored)} explored ones changed its score or was won, and {offered}"
                    + ("; its tasks list no valid actions, so exploring at random played none" if blind else ""))
            return []
        sources = stored + demos + explored
        with tempfile.TemporaryDirectory(prefix="evolver-mined-") as tmp:
            # The candidate's files, built apart first: its notes go into the demonstrations it imitates.
            root = Path(tmp) / "program"
            shutil.copytree(parent.root, root, ignore=shutil.ignore_patterns(".git"))
            info = mining.write_mined_skill(root / "skills", cfg.skill, cases, len(sources),
                                            sum(e.won for e in sources))
            program = Program(id=f"{parent.id}+{cfg.skill}", commit="", root=str(root),
                              hash=ProgramRepo.content_hash(root), manifest=dict(parent.manifest))
            also = (f" and {len(explored)} explored episodes ({cfg.explore_sweeps} sweeps, random moves then "
                    "the notes')") if explored else ""
            hypothesis = (f"mine {cfg.skill} from {len(stored)} stored training episodes and {len(demos)} "
                          f"demonstrations{also} (round {rounds + 1}): {info['cases']} cases ({len(new)} mined "
                          f"now, {len(had)} from the parent)")
            detail = {"round": rounds + 1, "stored": len(stored), "demos": len(demos), "explored": len(explored),
                      **info}
            base_hypothesis, base_detail = hypothesis, dict(detail)
            manifest = {}
            summary = self.imitate(ctx, program, tasks) if teach == "imitation" else None
            if summary:
                hypothesis += f"; imitate demonstrations with its notes: {describe(summary)}"
                manifest = {"model": summary["checkpoint"], "demos": plan}
            elif practised is not None:
                trained = self.practise(ctx, program, *practised)
                if trained:
                    summary, stats = trained
                    hypothesis += (f"; practise with its notes, best of {stats['samples']} samples on "
                                   f"{stats['kept']} of {stats['tasks']} tasks: {describe(summary)}")
                    detail["rollouts"] = stats
                    manifest = {"model": summary["checkpoint"]}
            if not manifest and cfg.train != "none":
                run.log("skill-miner: the policy was not trained this round: the candidate is the skill alone")
            if manifest:
                detail |= {k: summary[k] for k in ("train_run", "checkpoint", "losses", "samples", "from")}
            room = getattr(ctx, "n", 1)
            follows = cfg.follow_notes and _following(root) is False
            if cfg.train == "none" and follows:  # the skill alone: the harness follows its notes
                drafts = [(ctx.new_draft(OPERATOR, hypothesis=f"{hypothesis}; {FOLLOWING}",
                                         detail=detail | {"follow_notes": True}), {}, True)]
            else:
                drafts = [(ctx.new_draft(OPERATOR, hypothesis=hypothesis, detail=detail), manifest, False)]
            if cfg.train != "none" and follows and room > 1:
                # The same skill with the harness playing the notes' moves itself, so a policy that has
                # not learnt to follow them, or follows them loosely, is not in their way: with the new
                # weights, and (room for a third) with the parent's, in case training did harm.
                drafts.append((ctx.new_draft(OPERATOR, hypothesis=f"{hypothesis}; {FOLLOWING}",
                                             detail=detail | {"follow_notes": True}), manifest, True))
                if manifest and room > 2:
                    plain = f"{base_hypothesis}; the parent's policy; {FOLLOWING}"
                    drafts.append((ctx.new_draft(OPERATOR, hypothesis=plain, detail=base_detail | {
                        "follow_notes": True}), {}, True))
            for draft, weights, follow in drafts:
                target = Path(draft.path) / "skills" / cfg.skill
                if target.exists():
                    shutil.rmtree(target)
                shutil.copytree(root / "skills" / cfg.skill, target)
                draft.manifest.update(weights)
                if follow:
                    _follow(Path(draft.path))
        run.log(f"skill-miner: {hypothesis}" + (f" (and {len(drafts) - 1} twin(s): {FOLLOWING})"
                                                if len(drafts) > 1 else ""))
        return [d for d, _, _ in drafts]

    def teaching(self, tasks: list) -> str | None:
        """How this round teaches the policy the notes: ``train``, with ``auto`` resolved to imitation
        where the benchmark demonstrates any of imitation's ``tasks``, else expert iteration."""
        if self.cfg.train != "auto":
            return None if self.cfg.train == "none" else self.cfg.train
        offer = getattr(self.run.benchmark, "demonstration", None)
        return "imitation" if offer is not None and any(offer(t) for t in tasks) else "expert-iteration"

    def imitate(self, ctx, program: Program, tasks: list):
        """The training summary of the parent's policy fine-tuned on demonstrations of ``tasks`` replayed
        through ``program`` (the parent's files with the new skill); None when none was demonstrated."""
        run = self.run
        run.status = f"iteration {ctx.iteration}: skill-miner replays {len(tasks)} demonstrations with its notes"
        episodes = [e for e in Demos.replay_gold(run, program, tasks, store=False) if e.won and not e.error]
        if not episodes:
            run.log("skill-miner: the benchmark demonstrates none of these training tasks: nothing to imitate")
            return None
        return train_from(run, ctx.parent, ctx.iteration, OPERATOR, self.sft, episodes=episodes)

    def practise(self, ctx, program: Program, kept: list, stats: dict):
        """(training summary, rollout counts) of the parent's policy fine-tuned on its own best sampled
        rollouts (expert iteration, rewards alone), re-rendered through ``program`` (the parent's files
        with the new skill) so their prompts hold its notes; None when too few paid."""
        run = self.run
        if len(kept) < self.expert.cfg.min_trajectories:
            run.log(f"skill-miner: {len(kept)} of {stats['tasks']} practised tasks paid (min_trajectories "
                    f"{self.expert.cfg.min_trajectories}): nothing to learn from")
            return None
        replayed = [e for e in Demos.replay_episodes(run, program, kept) if not e.error]
        return train_from(run, ctx.parent, ctx.iteration, OPERATOR, self.expert.sft, episodes=replayed), stats


def _following(program_root: Path) -> bool | None:
    """The ``FOLLOW_NOTES`` switch of the harness under ``program_root``; None when it has none (evolved
    away, or a harness of another design)."""
    path = Path(program_root) / "harness" / "harness.py"
    found = _FOLLOW_RE.search(path.read_text()) if path.is_file() else None
    return None if found is None else found.group(1) == "True"


def _follow(program_root: Path) -> None:
    path = Path(program_root) / "harness" / "harness.py"
    path.write_text(_FOLLOW_RE.sub("FOLLOW_NOTES = True", path.read_text(), count=1))
