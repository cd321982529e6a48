"""The harness interface: the code between the model and the task.

A harness lives in the program (``harness/harness.py`` defines ``class Harness``), so it is versioned,
hashed into the evaluation cache, and can itself be evolved (the Meta-Harness proposer edits it).
The default one is ``evolver/seed/harness/harness.py``, copied into every new program.

The evaluator drives every live episode in lockstep through these calls:

``start(task, obs) -> state``
    A new episode. ``state`` is the harness's per-episode memory (any object); ``self`` persists
    across the episodes of one evaluation (memory across episodes, if a harness wants it).
``next_call(state, obs) -> GenRequest | ChoiceRequest | None``
    The model call for this step, i.e. how the task, the skills and the history become context.
    A ``ChoiceRequest`` asks the backend to pick one of the valid actions (by likelihood, or
    ``write=True``: by writing one and matching the nearest); ``None`` stops the episode (the
    harness decides when to stop).
``parse(state, obs, request, result) -> Action``
    How model output becomes an environment action or a tool call. Never raise for bad output:
    return ``Action(env_action="")`` or a best guess; the evaluator records what happened.
``observe(state, action, text)``
    The result of the action (an environment observation or a tool's output) for the history.

Tools the harness may offer (run by the evaluator, traced as tool calls):
``read_skill NAME`` returns a skill's body (progressive disclosure);
``run_skill NAME SCRIPT [ARGS...]`` runs a skill script in the sandbox.

What the harness can read is passed at construction: ``Harness(program: ProgramContext)``: the program's
``prompt`` (prompt.md), its ``skills``, ``select_skills(task, k)`` (the ``select_skills`` hook) and
``count_tokens(text)`` (the executor's tokenizer, for a harness that budgets its context),
``context_window`` (the tokens the executor's model reads at most: what there is to budget) and
``run_skill(name, script, args, stdin)`` (a skill's script run in the sandbox, its output returned).

Memory: ``state`` lives for one episode; attributes of ``self`` live for the episodes of one evaluation
(one harness object per program per evaluation), nothing longer: a harness that wants to learn across
evaluations must do it through the program (skills, prompt), which is what proposers evolve.

Stopping: the episode ends when ``next_call`` returns ``None``, when the environment says it is done, or
at the benchmark's step limit (tool calls do not count as steps).

Rules the evaluator enforces: the ``task`` a harness gets has no gold answer (``task.gold`` is None); each
call may take at most ``evolver.lockstep.HARNESS_CALL_S`` seconds; an exception fails that one episode
(score 0, traceback in the trace), never the run. A candidate's first (smoke) episode runs its harness in
a sandboxed subprocess (``evolver.harness_sandbox``), so what is passed between the evaluator and the
harness must be the plain dataclasses above (``Task``, ``Observation``, requests, results, ``Action``).
The leakage audits (``evolver.checks``) reject harness code that contains task ids or gold answers, or
reads a task's gold or seed.
"""
from __future__ import annotations

import dataclasses
import hashlib
import secrets
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from evolver.errors import EvolverError
from evolver.skills import Skill, load_skills
from evolver.types import Program, Task

SEED_DIR = Path(__file__).parent / "seed"  # the default harness, prompt.md and seed skills of a new program
#: The harness contract above, as text: what the Meta-Harness proposer shows the model that rewrites harnesses.
HARNESS_INTERFACE: str = __doc__ or ""


@dataclass
class Action:
    """What ``parse`` turns a model output into: an environment action, or a tool call with its args."""

    env_action: str | None = None  # sent to the environment
    tool: str | None = None  # or a tool call: "read_skill", "run_skill"
    args: list[str] = field(default_factory=list)
    output: str = ""  # the raw model output this came from (for the trace)


@dataclass
class ProgramContext:
    """What a harness sees of its program."""

    program: Program
    prompt: str
    skills: list[Skill]
    #: ``select_skills(task, k) -> list[Skill]``: the ``select_skills`` hook, with a lexical default.
    select_skills: Callable[[Task, int], list[Skill]]
    count_tokens: Callable[[str], int] = lambda text: max(1, len(text) // 4)
    #: Tokens the executor's model reads at most. A backend that declares none is taken for a current
    #: API model (``DEFAULT_CONTEXT_WINDOW``), not for the embedded 135M one.
    context_window: int = 32768
    _script_cache: dict = field(default_factory=dict, repr=False)

    def skill(self, name: str) -> Skill | None:
        return next((s for s in self.skills if s.name == name), None)

    def run_skill(self, name: str, script: str, args: list[str] = (), stdin: str = "") -> str:
        """Run one of a skill's scripts in the sandbox (time and memory limits, no network) and return
        what it printed, or ``""`` when it failed. The harness's own tool, for a harness that calls a
        skill's script itself (on an observation) instead of waiting for a small model to ask for it.
        Answers are remembered per script and input for the harness's lifetime."""
        key = (name, script, tuple(args), stdin)
        if key not in self._script_cache:
            self._script_cache[key] = _run_skill_script(self.skill(name), script, list(args), stdin)
        return self._script_cache[key]


def cut_marker(tokens: int) -> str:
    """How a harness marks text it cut to fit a budget: ``tokens`` is how much is missing. Reports count
    these markers in the stored prompts (:func:`evolver.report.cut_lines`), so a cut is never silent."""
    return f"[... {int(tokens)} more tokens cut]"


CUT_PATTERN = r"\[\.\.\. (\d+) more tokens cut\]"  # what :func:`cut_marker` writes, as a regular expression


DEFAULT_CONTEXT_WINDOW = 32768  # a backend's model that declares no window (API models have this or more)


def context_window_of(backend: Any) -> int:
    """The tokens ``backend``'s model reads at most: its ``context_window``, else :data:`DEFAULT_CONTEXT_WINDOW`."""
    window = getattr(backend, "context_window", None)
    return int(window) if isinstance(window, int) and window > 0 else DEFAULT_CONTEXT_WINDOW


SKILL_SCRIPT_S = 5.0  # one script run by a harness: well inside the harness call's own limit


def _run_skill_script(skill: Skill | None, script: str, args: list[str], stdin: str) -> str:
    if skill is None:
        return ""
    path = (Path(skill.path) / script).resolve()
    if Path(skill.path).resolve() not in path.parents or not path.is_file():
        return ""  # only the skill's own files
    from evolver.sandbox import run_script

    res = run_script(path, args, timeout_s=SKILL_SCRIPT_S, stdin=stdin, packages=skill.packages)
    return res.stdout.strip() if res.returncode == 0 and not res.timed_out else ""


_TASK_SALT = secrets.token_bytes(16)  # per process: a harness cannot hash known ids to find its task's


def task_for_harness(task: Task, hints: dict | None = None, public_seed: bool = False) -> Task:
    """The task as a harness gets it: the prompt, category, split, step limit, tools and ``hints`` (over the
    benchmark's ``harness_hints``). Not its gold answer (for the scorer and the diagnosis), nor what would
    let code regenerate the instance and recompute the answer: the seed and ``meta`` are blanked unless the
    benchmark declares them public (``Benchmark.public_seed``), and the id is an opaque token, stable within
    a process, that names no seed or index."""
    opaque = "task-" + hashlib.sha256(_TASK_SALT + task.id.encode()).hexdigest()[:16]
    return dataclasses.replace(task, gold=None, hints={**(hints or {}), **(task.hints or {})},
                               **({} if public_seed else {"id": opaque, "seed": 0, "meta": {}}))


class HarnessLoadError(EvolverError):
    pass


def load_harness_class(program_root: str | Path) -> type:
    """Import ``harness/harness.py`` of a program checkout and return its ``Harness`` class."""
    path = Path(program_root) / "harness" / "harness.py"
    if not path.exists():
        raise HarnessLoadError(f"{path} is missing: a program needs harness/harness.py defining class Harness")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    name = f"evolver_program_harness_{digest}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise HarnessLoadError(f"{path} failed to import: {exc!r}") from exc
        sys.modules[name] = module
    cls = getattr(module, "Harness", None)
    if cls is None:
        raise HarnessLoadError(f"{path} defines no class Harness")
    return cls


def program_context(program: Program, select: Callable | None = None,
                    count_tokens: Callable[[str], int] | None = None) -> ProgramContext:
    """What a harness sees of ``program`` (prompt, skills); ``select(task, k)`` picks skill bodies (default:
    lexical relevance). Inside a run, use ``run.context(program)``: it routes selection through the hook."""
    root = Path(program.root)
    prompt_path = root / "prompt.md"
    prompt = prompt_path.read_text() if prompt_path.exists() else ""
    skills_dir = root / "skills"
    skills = load_skills(skills_dir) if skills_dir.exists() else []
    from evolver.skills import relevant

    def default_select(task: Task, k: int) -> list[Skill]:
        return relevant(skills, f"{task.category} {task.prompt}", k)

    chosen = select or default_select
    ctx = ProgramContext(program, prompt, skills, lambda task, k: chosen(task, k))
    if count_tokens:
        ctx.count_tokens = count_tokens
    return ctx


def make_harness(ctx: ProgramContext) -> Any:
    """The program's harness, imported in this process (trusted code only: the evaluator plays a candidate's
    harness sandboxed, :class:`evolver.harness_sandbox.SandboxedHarness`)."""
    return load_harness_class(ctx.program.root)(ctx)
