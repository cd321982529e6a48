"""The benchmark interface. A new benchmark is one short file: see examples/custom_benchmark.py.

A benchmark yields ``Task``s per split and makes an ``Env`` per task. Single-turn tasks are envs
that finish after one step. Scores are in 0..1 with partial credit; ``won`` means full success.

The contract (tests/test_benchmark_contract.py keeps it true):

Tasks and splits
- ``tasks(split)`` is deterministic for a given configuration: the same ids every call.
- ``train`` / ``dev`` / ``test`` never share a task; ``test`` is only used for final reports.
- ``Task.gold`` is for the scorer, the failure diagnosis and imitation; the harness never sees it
  (it gets ``gold=None``), nor the task's ``seed``, ``meta`` or real id unless ``public_seed`` says so. The demonstration convention: a training task whose ``gold`` is a list of
  action strings that solves it from ``reset()`` is a demonstration (``Benchmark.demonstration``;
  imitation, SFT and SKILLRL replay it). Override ``demonstration`` when gold has another shape.

Episodes
- ``Env.reset()`` gives the first observation; ``Env.step(action)`` one more, until one says ``done``.
- ``Env.step`` never raises for a bad action: it returns an observation saying so (score unchanged).
  Only systemic failures (the game engine died) raise ``BenchmarkError``.
- ``Observation.score`` is the running score in 0..1; the episode's score is the last one.
- Step limits: ``Task.max_steps``, else ``Benchmark.max_steps``. Every model call that is not a tool
  call counts; at the limit the evaluator ends the episode with the score so far.
- ``Observation.info`` keys the core reads: ``won`` (bool: full success; default ``score >= 1``),
  ``rewards`` (dict of named sub-rewards, kept per episode for multi-reward RL), and, for the seed
  harness's loop guard, ``look`` and ``inventory`` (the state, where a text game reports it). Others
  are kept in the trace only.

What the harness shows (the seed harness; an evolved one may differ)
- ``preset`` "text-game" (the default): the system prompt (the program's prompt.md, skills), then a
  user message with ``Task: <task.prompt>``, notes and actions of older steps, the last few steps in
  full, the latest ``Observation:`` and the ``Valid actions:`` when the env lists them. The reset
  observation is shown at step 0 only: what must persist (the first room, the ticket) belongs in
  ``Task.prompt``. Older steps are compacted (their observations shortened to a line or a note).
- "chat": the task prompt is the first user message; each action is an assistant turn and each
  observation the next user turn. The whole reply is the action.
- "tool-calling" (the default for a task whose ``Task.tools`` is set): "chat" plus the tools, OpenAI function
  schemas (check them with ``ToolCalls.check``: a malformed one is an error that names the fix). They are
  listed in the system prompt and passed with each request (``GenRequest.tools``, ``tool_choice``): the
  first reply must be a call, later ones may be a call or the final answer. Every backend answers with a
  call that parses (``GenResult.tool_calls``: native from an API server, decoded under the tools' grammar
  by the local engines). A call reaches ``Env.step`` as canonical JSON text, ``ToolCalls.action(call, tools)``
  (``{"name": ..., "arguments": {...}}``, the arguments in their schema's order: as the grammar writes them),
  and is stored so as the step's action; a demonstration's calls are replayed in that form. A plain
  reply is sent as text. A call the environment cannot run gets an observation saying why, as any bad
  action does. Named sub-rewards (the right tool, the right arguments) belong in ``info["rewards"]`` of the
  final observation only: the harness reads every observation, and a running one would tell it the answer.
- Budgets are in tokens of the executor's tokenizer, never a silent character cut, and follow the
  executor's context window (``ProgramContext.context_window``; 32k for a backend that declares none):
  the task prompt and each observation up to ``observation_tokens`` (1/32 of the window, at least 400),
  tool descriptions up to ``tools_tokens`` (1/8, at least 3,000), replies up to ``reply_tokens``
  (text-game 24; chat 1/64, at least 256). Text over budget is cut with a visible
  ``[... N more tokens cut]`` marker (``evolver.harness.cut_marker``), which stays in the trace's prompt
  and which the report counts per split, naming the episodes whose task prompt itself was cut. Valid
  actions are listed up to ``actions_tokens`` (1/32, at least 400); past it, a share of each command (first
  word), those nearest the task first, and a marker; the model may still write any valid action. A 135M
  model's 8k window gets the floors; a 128k one reads a 3,000-character task whole.
- ``harness_hints`` sets these for every task (``preset``, ``system_prompt``, ``observation_tokens``,
  ``reply_tokens``, ``actions_tokens``); ``Task.hints`` overrides them per task. A ``system_prompt`` replaces the seed
  program's generic prompt.md when the seed is created, so evolution can edit it from there.

Judge-scored tasks
- A task with no verifier is scored by a judge model: ``Benchmark.rubric(task)`` returns what the judge
  scores against (default: ``task.meta["rubric"]``; None: the environment scores the task). The evaluator
  holds such a task's episodes until all of it in one evaluation have played (every program and seed of
  the lockstep; a GRPO group), the judge ranks them together (``evolver.judge``), and the rewards, in
  0..1 (best 1, worst 0), replace their scores; the environment's own score stays as the last step's
  ``reward``. The environment still plays the episode and may score 0 throughout.

Concurrency
- The evaluator keeps up to ``max_live`` Envs open at once (``--max-live``, default 32; a benchmark
  caps it with ``Benchmark.max_live``) and steps them interleaved, one batched model call per round:
  Envs of one benchmark must not share mutable state, or must guard it. A simulator that holds one
  episode per process needs a pool of such processes, which its Envs lease on ``reset`` and release
  on ``close``, with ``max_live`` no larger than the pool: ``evolver.EnvPool`` and ``PooledEnv`` do it,
  with a bounded replay of the episode's actions when a worker dies or has to be shared
  (``examples/pooled_simulator.py``).

Options
- ``factory(**options)`` receives ``benchmark_options``; declare them as named parameters (not a
  bare ``**options``) so an unknown one is an error with "did you mean" before anything plays.
"""
from __future__ import annotations

import abc

from evolver.types import Observation, Task

SPLITS = ("train", "dev", "test")


class Env(abc.ABC):
    """One episode's environment: ``reset()``, then ``step(action)`` until an observation says ``done``."""

    @abc.abstractmethod
    def reset(self) -> Observation:
        """Start the episode; the first observation."""

    @abc.abstractmethod
    def step(self, action: str) -> Observation:
        """Apply one action; never raises for a bad action (see the module docstring)."""

    def close(self) -> None:
        pass


class Benchmark(abc.ABC):
    """A source of tasks per split and an environment per task (see the module docstring for the contract).
    Registered with ``register_benchmarks(register)`` as ``factory(**options)``."""

    name: str = "base"
    #: Task categories; training batches are sampled across them, and a run's split sizes (24 dev, 36 test and
    #: 6 training tasks an iteration, unless its config sets ``loop.*_per_category``) are spread over them.
    categories: list[str] = []
    #: Step limit per episode (the harness may stop earlier).
    max_steps: int = 1
    #: Skills a new program starts with unless the config names its own (``seed_skills``): names of
    #: the skills that ship in evolver's ``skills/`` or paths to skill folders. Keep it free of this
    #: benchmark's answers (no solvers, no data mined from gold): the seed is what evolution starts from.
    seed_skills: list[str] = []
    #: Opt-in skill packs: pack name -> a folder whose subfolders (each with a SKILL.md) are the pack's
    #: skills, or a list of skill folders. ``seed_skills`` may name a pack (all its skills) or one skill of
    #: a pack by its folder name. Skills written by hand for this benchmark belong here, not in
    #: ``seed_skills``, with ``metadata.hand_written: true`` in their front matter: reports label programs
    #: that carry one (``--set seed_skills=PACK`` opts in).
    skill_packs: dict = {}
    #: How the harness should present every task (``Task.hints`` overrides per task): ``preset``,
    #: ``system_prompt``, ``observation_tokens``, ``reply_tokens``, ``actions_tokens`` (see the module docstring).
    harness_hints: dict = {}
    #: Whether a harness may see each task's real id, ``seed`` and ``meta``. Off: it gets an opaque id and
    #: neither, so code that imports this benchmark cannot regenerate the instance it plays and recompute
    #: the answer. Turn it on only where the seed gives nothing away (a public game's seed, say).
    public_seed: bool = False
    #: Installed distributions a harness of this benchmark may import, each with the reason (``{"tokenizers":
    #: "counts tokens as the scorer does"}``). A sandboxed harness sees the standard library, evolver's
    #: harness API and these (with what they require); nothing that generates or scores tasks.
    harness_packages: dict = {}
    #: The most Envs this benchmark can have open at once (None: the evaluator's ``max_live``).
    max_live: int | None = None

    @abc.abstractmethod
    def tasks(self, split: str, per_category: int | None = None) -> list[Task]:
        """The split's tasks, deterministic; ``per_category`` caps each category."""

    @abc.abstractmethod
    def env(self, task: Task) -> Env:
        """A fresh environment for one episode of ``task``."""

    def demonstration(self, task: Task) -> list[str] | None:
        """Actions that solve a *training* task, for imitation (``evolver.demonstrations``), or None
        when the benchmark offers none. Default: ``task.gold`` when it is a list of actions."""
        gold = task.gold
        if task.split == "train" and isinstance(gold, list) and gold and all(isinstance(a, str) for a in gold):
            return list(gold)
        return None

    def rubric(self, task: Task) -> str | None:
        """What a judge scores ``task``'s episodes against, or None when its environment scores it. A task
        with a rubric is judge-scored (see the module docstring). Default: ``task.meta["rubric"]``."""
        rubric = task.meta.get("rubric") if isinstance(task.meta, dict) else None
        return str(rubric) if rubric else None

    def close(self) -> None:
        pass
