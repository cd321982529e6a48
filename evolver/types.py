"""The nouns that cross plugin boundaries.

Everything here is a plain dataclass: plugins build and read them, the store persists them,
and none of them holds a live resource (model, JVM, database handle).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any


def stable_hash(*parts: Any) -> str:
    """Short sha256 of JSON-encoded parts: the key of caches and ids that must survive restarts."""
    raw = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass
class Task:
    """One benchmark instance.

    ``gold`` is what the scorer and the failure diagnosis may see; it never goes into a model's
    context while the task is played, and proposers must not write it into skills.
    """

    id: str
    benchmark: str
    split: str  # "train" | "dev" | "test"
    category: str
    seed: int = 0
    prompt: str = ""
    gold: Any = None
    meta: dict = field(default_factory=dict)
    #: This task's step limit (None: the benchmark's ``max_steps``); tool calls do not count.
    max_steps: int | None = None
    #: What the harness should know about presenting this task (over the benchmark's ``harness_hints``):
    #: ``preset`` ("text-game", "chat", "tool-calling"), ``system_prompt``, ``observation_tokens``,
    #: ``reply_tokens``. See ``evolver.benchmarks.base`` for what the seed harness does with each.
    hints: dict = field(default_factory=dict)
    #: Tools the agent may call, as JSON schemas in the OpenAI function format
    #: (``{"type": "function", "function": {"name", "description", "parameters"}}``); None: no tools.
    tools: list[dict] | None = None


@dataclass
class Observation:
    """What the environment shows after reset or a step.

    ``score`` is the running score in 0..1 (partial credit), ``actions`` the valid actions when the
    benchmark lists them (None when the action space is free text).
    """

    text: str
    actions: list[str] | None = None
    score: float = 0.0
    done: bool = False
    info: dict = field(default_factory=dict)


@dataclass
class Message:
    """One chat message."""

    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass
class GenRequest:
    """One generation call. Backends receive lists of these and answer them as one batch."""

    messages: list[Message]
    max_tokens: int = 64
    temperature: float = 0.0
    stop: list[str] | None = None
    seed: int | None = None
    logprobs: bool = False  # ask local backends for prompt/completion ids and per-token log-probs
    #: Tools the model may call (OpenAI function schemas, checked by ``ToolCalls.check``). Every backend
    #: answers with a call that parses, in ``GenResult.tool_calls``: the OpenAI backend passes them on
    #: natively, the local engines decode under a grammar of the schemas (``evolver.tool_calls``).
    tools: list[dict] | None = None
    #: With ``tools``: "auto" (None: a call or a final message), "required" (a call), "none" (free text),
    #: or a tool's name (a call of that tool), as OpenAI's ``tool_choice``.
    tool_choice: str | None = None
    #: Replies that are likely (a written choice's options): a local backend may check their tokens
    #: as drafts while decoding. The reply is the same with or without them; only its speed changes.
    drafts: list[str] | None = None
    #: End a looping reply: stop once one line (numbering aside) has been written this many times.
    #: The reply keeps the repeats, so a check downstream still sees the loop; a backend that cannot
    #: watch its decoding returns the whole reply, which reads the same to such a check.
    max_line_repeats: int | None = None


@dataclass
class GenResult:
    """A backend's answer to one :class:`GenRequest`; a failed request has ``error`` set and ``text == ""``."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Filled by local backends when asked (RL needs the exact ids the model saw).
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    error: str | None = None
    #: The calls of a request with ``tools``: ``[{"name", "arguments"}]``, ``arguments`` a dict (or the raw
    #: string a server sent when it was not valid JSON); None or empty for a final message.
    tool_calls: list[dict] | None = None
    #: The grammar a local engine decoded this reply under (None: unconstrained). The mask is part of the
    #: policy: ``logprobs`` are of the masked distribution, and a trainer recomputes them under it.
    grammar: str | None = None


@dataclass
class ChoiceRequest:
    """Pick one of ``options`` as the assistant's reply to ``messages``.

    A backend that can score continuations ranks options by length-normalised log-likelihood;
    others generate and match. ``write=True`` asks every backend to write a reply and match the
    nearest option, which picks better actions for a small model, base or fine-tuned
    (``bench/action_modes.py``).
    """

    messages: list[Message]
    options: list[str]
    write: bool = False
    #: Seed of a sampled choice (the written reply, or the draw among ranked options); None: greedy
    #: backends ignore it, the evaluator sets it from the episode for a sampling backend.
    seed: int | None = None


@dataclass
class ChoiceResult:
    """A backend's answer to one :class:`ChoiceRequest`: the chosen option's ``index`` and every option's score."""

    index: int
    scores: list[float]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    #: When the choice was made by writing and matching (a backend that does not score options),
    #: the generation behind it: RL trains on what was written, not on the option it matched.
    sample: GenResult | None = None

    @property
    def text(self) -> str:  # convenience for traces
        return ""


@dataclass
class Step:
    """One model call of an episode, exactly as it happened."""

    index: int
    prompt: str  # the rendered context (chat messages as JSON)
    output: str  # the raw model output (or the chosen option)
    action: str  # the parsed action sent to the environment ('' if none)
    observation: str  # what the environment (or a tool) answered
    reward: float = 0.0  # running score after this step
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: list[dict] = field(default_factory=list)
    latency_s: float = 0.0
    error: str | None = None
    #: The online monitor's verdict when it flagged this step (evolver/monitor.py ``StepMonitor``):
    #: ``{"rules": [...], "confirmed": bool, "blocked": bool, "judge": reply}``; None when unflagged.
    monitor: dict | None = None
    #: RL only, never stored: when the backend returned token ids (``GenRequest.logprobs``), the
    #: exact ``prompt_ids``, ``completion_ids`` and ``logprobs`` of this call plus ``state`` (the
    #: observation the action answered), so a trainer never re-renders a prompt.
    sample: dict | None = field(default=None, repr=False, compare=False)


@dataclass
class Episode:
    """One attempt at one task by one program. A failure is a score of 0 with ``error`` set."""

    task: Task
    program_id: str
    program_hash: str
    model: str
    seed: int
    steps: list[Step] = field(default_factory=list)
    score: float = 0.0
    won: bool = False
    rewards: dict[str, float] = field(default_factory=dict)  # named sub-rewards
    prediction: str = ""  # final answer / last action, for diagnosis
    error: str | None = None
    wall_s: float = 0.0
    model_s: float = 0.0
    id: str = ""
    run_id: str = ""
    purpose: str = "eval"  # "train" batch rollout, "eval" on a split, "smoke"
    cached: bool = False
    #: The step limit it was played under (0: not set): part of the cache key, so an evaluation under
    #: another ``max_steps`` (``--set benchmark_options.max_steps``) plays again instead of reusing it.
    max_steps: int = 0

    # Totals over steps, kept as fields so an episode loaded without its steps still has them.
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def tally(self) -> None:
        """Recompute the token totals from the steps."""
        self.prompt_tokens = sum(s.prompt_tokens for s in self.steps)
        self.completion_tokens = sum(s.completion_tokens for s in self.steps)

    @property
    def cache_key(self) -> str:
        key = (self.program_hash, self.task.benchmark, self.task.id, self.model, self.seed)
        return stable_hash(*key, self.max_steps) if self.max_steps else stable_hash(*key)


@dataclass
class Proposal:
    """A proposer's idea: what to change and why, before it is materialised."""

    proposer: str
    operator: str  # e.g. "create", "edit", "merge", "harness"
    parent_id: str
    hypothesis: str = ""
    detail: dict = field(default_factory=dict)
    id: str = ""


@dataclass
class Candidate:
    """A proposal realised as a commit on its own branch (in its own worktree)."""

    id: str
    proposal: Proposal
    branch: str
    commit: str = ""
    worktree: str = ""
    program_hash: str = ""
    status: str = "proposed"  # proposed | rejected | evaluated | admitted | discarded
    reason: str = ""
    scores: dict[str, float] = field(default_factory=dict)


@dataclass
class Evaluation:
    """Aggregate of a program's episodes on one split: the objectives come from here."""

    program_id: str
    split: str
    score: float
    success: float
    n: int
    context_tokens: float  # mean prompt tokens per episode
    cost: float  # total tokens (prompt + completion) per episode
    per_category: dict[str, float] = field(default_factory=dict)
    errors: int = 0

    def metrics(self) -> dict[str, float]:
        return {"score": self.score, "success": self.success, "context_tokens": self.context_tokens,
                "cost": self.cost}


def to_dict(obj: Any) -> dict:
    return asdict(obj)


@dataclass
class Program:
    """A checked-out program: the files under ``root`` (prompt.md, skills/, harness/, program.toml).

    ``hash`` is the content hash of everything that decides behaviour (scores in the manifest excluded);
    it keys the evaluation cache, so two commits with the same files share their episodes.
    """

    id: str
    commit: str
    root: str
    hash: str
    manifest: dict = field(default_factory=dict)

    @property
    def model(self) -> str | None:
        return self.manifest.get("model")
