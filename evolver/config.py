"""Configuration: ``evolver.toml`` (all keys optional) with CLI overrides (``--set a.b=value``).

Every field is documented where it is declared. Unknown keys are an error that names the key and
the closest known one, so a typo never silently falls back to a default.
"""
from __future__ import annotations

import difflib
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evolver.errors import ConfigError

ROLES = ("executor", "proposer", "builder", "judge")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RoleConfig(Strict):
    backend: str = "auto"
    """Backend name (``evolver plugins`` lists them): auto, transformers, openai, vllm, scripted, ...
    ``auto`` is the fastest local engine installed: vllm where its plugin and a GPU are, else transformers."""
    model: str | None = None
    """Model for the backend; None means the embedded SmolLM2-135M-Instruct for local backends."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Extra keyword arguments for the backend (base_url, dtype, max_batch, ...)."""
    temperature: float = 0.0
    """Sampling temperature for this role's calls (0 = greedy, reproducible). The executor's episodes in the
    loop are sampled at it when above 0 (each request seeded from its episode, so a rerun repeats them)."""
    max_tokens: int = 256
    """Output budget per call for this role (the executor's harness sets its own for actions)."""


class LoopConfig(Strict):
    iterations: int = 3
    """Maximum iterations of the loop (parent -> rollouts -> failures -> proposals -> eval -> frontier)."""
    train_per_category: int | None = None
    """Training batch per iteration: this many tasks from each category (a stratified batch). None: about
    6 in all (:data:`SPLIT_TASKS`), spread over the benchmark's categories (one each on a benchmark of 6)."""
    dev_per_category: int | None = None
    """Validation split size per category; selection sees only this split. None: about 24 tasks in all,
    ``ceil(24 / categories)`` each (4 on a benchmark of 6 categories, 24 on a benchmark of one). 24 tasks
    are enough for a real +0.2 gain to pass the 95% paired gate ~90% of the time (with a per-task spread
    of 0.3; ``tests/test_gate.py`` simulates it), where 12 tasks pass it ~60% of the time and 4 almost
    never, which is why the size is a total, not a count per category."""
    test_per_category: int | None = None
    """Held-out test split per category, used only for the final report. None: about 36 tasks in all,
    spread over the categories like dev (6 each on a benchmark of 6), so the paired best-vs-seed interval
    is narrower than the dev one that selected the best."""
    failure_threshold: float = 0.8
    """tau: episodes scoring below it are failures (EvoSkill uses 0.8 on a 0..1 score)."""
    staged: bool = True
    """Staged evaluation with early stopping: candidates play one dev task per category, then half of
    each, before the rest; one whose paired score against its parent on the tasks so far is worse (the
    gate's test at ``gate_level``) and that is leaner on nothing cannot be admitted, and stops there."""
    admit_early: bool = True
    """With ``staged``: a candidate whose paired score after half of each category is better than every
    frontier member's, at a level stricter than ``gate_level`` (O'Brien-Fleming alpha spending:
    evolver/gate.py ``interim_level``, ~99.4% halfway at 95%), is already certain to be admitted: it is
    admitted on the tasks it played and does not play the rest until something is judged against it: the
    next candidates, or the choice of the best among several members (evolver/selection.py
    ``complete_members``)."""
    monitor: Literal["judge", "rules", "off"] = "judge"
    """The anti-hack monitor on each candidate's added code (evolver/monitor.py): rules flag what reaches for
    answers, the store or the evaluator; "judge" rejects what the judge role confirms, "rules" whatever
    is flagged, "off" nothing."""
    sandbox_harness: bool = True
    """Run every program's harness in a sandboxed subprocess, in every stage the loop plays (smoke, probe,
    dev, test, proposers' rollouts): memory limit, no network, read-only file system, and a process of its
    own, so candidate code never runs where the tasks' answers, the store and the audits live (see
    evolver/harness_sandbox.py). Off: harnesses run in-process, each call under the same time limit."""
    harness_memory_mb: int = 2048
    """Memory limit of each sandboxed harness process."""
    candidates_per_iteration: int = 3
    """How many candidates the proposers build per iteration (evaluated side by side), shared out
    among the proposers in order (the default three get one each)."""
    frontier_capacity: int = 3
    """k: frontier members kept; the tie-break is documented in evolver/frontier.py."""
    objectives: list[str] = Field(default_factory=lambda: ["score:max", "context_tokens:min", "cost:min"])
    """Pareto objectives as metric:max|min over score, success, context_tokens, cost."""
    gate: Literal["bootstrap", "sign", "none"] = "bootstrap"
    """How admission tells a gain from noise on score and success: a paired test of the candidate against
    each frontier member on their common dev tasks (evolver/gate.py; the rule is in evolver/frontier.py).
    bootstrap: percentile interval of the mean per-task difference, expanded for small splits; sign: exact
    sign test (more conservative); none: plain Pareto on the mean values."""
    gate_level: float = Field(0.95, gt=0.5, lt=1.0)
    """Confidence level of the paired test (and of the intervals the report prints)."""
    dev_episodes_per_task: int | None = Field(None, ge=1)
    """Episodes per task in dev and test evaluations, each with its own seed (episode_seed + k); the
    paired test averages them per task. None: 1 when the executor plays greedy (roles.executor.temperature
    = 0: more would be copies), 3 when it samples."""
    test_frontier: bool = False
    """Play every frontier member on test, not only the seed and the best (each is 36 more episodes on
    the default run). The best is picked on dev either way."""
    best_of_n: bool = False
    """Report a no-evolution baseline: the seed program sampled with N seeds on dev (N = the candidates the
    run evaluated on dev), the best seed on dev then played on test, beside the seed and the evolved best.
    Off by default: it plays N x dev + test episodes of the seed, more than the whole search on the
    default run."""
    baseline_temperature: float = Field(0.7, gt=0.0)
    """Sampling temperature of the best-of-N baseline (its written actions are sampled, then matched to the
    nearest valid one). 0.7, the usual setting for sampling a small chat model and the one the
    expert-iteration proposer samples the 135M model at: low enough that each try stays a sensible
    attempt, high enough that N tries differ. Not tuned here: the report shows each seed's dev score."""
    selector: str = "round-robin"
    """Parent selection: round-robin, best, random, ucb (or a plugin's)."""
    patience: int = 3
    """Stop early after this many iterations without an admission."""
    max_wall_s: float = 540
    """Wall-time budget for the search: no iteration starts that would end past it (judged by the
    mean duration of the iterations so far). The final test evaluation and the best-of-N baseline come
    after it (about 5 minutes of a default run on 2 cores, which is meant to end within 15)."""
    max_proposer_tokens: int = 2_000_000
    """Budget on tokens spent by proposer/builder roles."""
    max_episodes: int | None = None
    """Budget on evaluation: no iteration starts once the run has played this many episodes (rollouts,
    smoke, probe and dev episodes; cached ones are not played, so they do not count). None: no limit."""
    episode_seed: int = 0
    """Seed of every episode's sampling (part of the evaluation cache key)."""

    @model_validator(mode="before")
    @classmethod
    def _removed_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "score_margin" in data:
            if data["score_margin"] is not None:  # None was its default: a stored config of an older run
                raise ValueError("loop.score_margin was removed: admission now needs a paired test on the dev "
                                 "tasks (loop.gate = bootstrap | sign | none, loop.gate_level = 0.95)")
            data = {k: v for k, v in data.items() if k != "score_margin"}
        return data


#: The tasks in all that each split size left unset (None) comes to, spread over a benchmark's categories.
SPLIT_TASKS = {"train_per_category": 6, "dev_per_category": 24, "test_per_category": 36}


def sized(loop: LoopConfig, categories: int) -> LoopConfig:
    """``loop`` with every split size left unset filled in for a benchmark of ``categories`` categories:
    ``ceil(total / categories)`` each, the totals in :data:`SPLIT_TASKS`. Sizes a user set stay as set."""
    n = max(1, int(categories))
    return loop.model_copy(update={k: -(-total // n) for k, total in SPLIT_TASKS.items() if getattr(loop, k) is None})


class ClusterConfig(Strict):
    engine: str = "local"
    """Where episodes play: "local" (this process, batched in lockstep) or a cluster engine plugin
    (``ray``: ``pip install -e '.[ray]'``). The driver stays the only store writer either way."""
    address: str = "local"
    """The cluster to join: "local" starts one on this machine, "auto" joins the one running here,
    ``ray://HOST:PORT`` a remote one."""
    workers: int | None = Field(None, ge=1)
    """Workers, each holding one executor replica. None: one per GPU in the cluster, else 2."""
    cpus_per_worker: float = Field(1.0, gt=0)
    """CPUs each worker reserves."""
    gpus_per_worker: float | None = Field(None, ge=0)
    """GPUs each worker reserves. None: 1 when the cluster has GPUs, else 0."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Extra keyword arguments for the engine (ray: ``num_cpus`` of a local cluster, ``runtime_env``)."""


class Cap(Strict):
    tokens: int | None = Field(None, ge=0)
    """Prompt and completion tokens, at most (None: no cap)."""
    calls: int | None = Field(None, ge=0)
    """Model requests, at most (each request of a batch is one)."""
    cost: float | None = Field(None, ge=0)
    """Spend at the prices of ``budget.prices`` (their currency), at most (None: no cap)."""


class Price(Strict):
    input: float = Field(0.0, ge=0)
    """The price of a million prompt tokens."""
    output: float = Field(0.0, ge=0)
    """The price of a million completion tokens."""


class BudgetConfig(Cap):
    """Caps a run cannot exceed (``[budget]``), over all roles; ``[budget.roles.<role>]`` caps one role.
    A request that could cross a cap, counting the requests still in flight at their most, is refused
    before it is sent, and the run stops there with a partial report (``evolver.budget``)."""

    roles: dict[str, Cap] = Field(default_factory=dict)
    """Per role (executor, proposer, builder, judge): its own caps, beside the total ones."""
    prices: dict[str, Price] = Field(default_factory=dict)
    """Per model, as a role names it (``roles.<role>.model``; the backend's name where the role names no
    model): ``{ input = ..., output = ... }``, per million tokens. ``"*"`` prices every other model. A
    model without a price costs nothing (a local one)."""

    def price(self, model: str | None) -> Price:
        """The price of ``model`` (:attr:`prices`, else ``"*"``, else free)."""
        return self.prices.get(model or "", self.prices.get("*", Price()))

    @model_validator(mode="after")
    def _cost_needs_prices(self):
        capped = self.cost is not None or any(c.cost is not None for c in self.roles.values())
        if capped and not self.prices:
            raise ValueError("a cost cap needs prices: set budget.prices, e.g. [budget.prices.\"gpt-4o-mini\"] "
                             "input = 0.15, output = 0.6 (per million tokens); '*' prices every other model")
        return self


class Config(Strict):
    """A run's configuration (``evolver.toml`` plus ``--set`` overrides), validated; every field documented."""

    benchmark: str = "basic"
    """Benchmark plugin name. Where there is no ``evolver.toml``, the installed ``default`` profile (a
    plugin's ``register_profiles``) names it; without one, the core's zero-dependency ``basic``."""
    benchmark_options: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the benchmark: its factory's named parameters (``evolver plugins`` lists
    them), checked before any work. Options set for the config file's (or profile's) benchmark are dropped
    when an override (``--set benchmark=X``, ``evolver eval --benchmark X``) switches to another one;
    ``--set benchmark_options.KEY=VALUE`` overrides always hold."""
    store: str = "store"
    """Workspace folder: evolver.duckdb, programs/ (git), worktrees/, reports/."""
    demonstrations: bool = True
    """Use the demonstrations the benchmark offers for training tasks (imitation, the skill miner, SFT).
    False: learn from rewards alone, as on a benchmark that offers none."""
    harness: str = "default"
    """Harness a new program is seeded with (``evolver init``); afterwards the program's own code rules."""
    seed_skills: list[str] | None = None
    """Skills the seed program starts with: names of the skills that ship in the repository's
    ``skills/``, paths to skill folders, or names of the benchmark's skill packs (``skill_packs``: a
    pack's name stands for all its skills, a skill of a pack can be named alone); a plain string is a
    comma-separated list (``--set seed_skills=PACK``). None: the ones the benchmark suggests (its
    ``seed_skills``); []: none. A pack of hand-written skills is opt-in, labelled as such in reports."""
    proposers: list[str] = Field(default_factory=lambda: ["skill-miner"])
    """Active proposer plugins; several may run side by side. The default learns from experience with no
    capable model needed (``plugins/experience``'s skill miner: a skill of data mined from the store's
    rewards, and the policy taught to follow its notes by imitation where the benchmark demonstrates
    tasks, else by expert iteration). With a bigger model add ``evoskill``, ``metaharness``, ``imitation``,
    ``expert-iteration``, ``grpo``."""
    trainer: str | None = None
    """Trainer ``evolver train`` runs when neither ``--trainer`` nor a trainer's own flag names one.
    None: the first registered trainer without a flag of its own (``evolver plugins`` lists them)."""
    roles: dict[str, RoleConfig] = Field(default_factory=lambda: {r: RoleConfig() for r in ROLES})
    """Backend and model per role: executor, proposer, builder, judge."""
    loop: LoopConfig = Field(default_factory=LoopConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    """Hard caps on tokens and requests, in total and per role (``[budget]``); none by default."""
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    """Where episodes play (``[cluster] engine = "ray"``); the default plays them in this process."""
    plugins: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per-plugin options, e.g. ``[plugins.evoskill] mode = "single-call"``."""

    @field_validator("seed_skills", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        return [s.strip() for s in value.split(",") if s.strip()] if isinstance(value, str) else value

    @field_validator("roles")
    @classmethod
    def _known_roles(cls, roles: dict[str, RoleConfig]) -> dict[str, RoleConfig]:
        unknown = [r for r in roles if r not in ROLES]
        if unknown:
            raise ValueError(f"unknown role(s) {unknown}; roles are {', '.join(ROLES)}")
        return {r: roles.get(r, RoleConfig()) for r in ROLES}

    def role(self, name: str) -> RoleConfig:
        return self.roles[name]


def _known_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        keys.append(prefix + name)
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys += _known_keys(ann, prefix + name + ".")
    return keys


def _explain(exc: ValidationError, source: str) -> ConfigError:
    known = _known_keys(Config) + [f"roles.{r}.{k}" for r in ROLES for k in RoleConfig.model_fields]
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            close = difflib.get_close_matches(loc, known, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(k for k in known if '.' not in k)}"
            lines.append(f"unknown config key {loc!r}{hint}")
        else:
            lines.append(f"config key {loc!r}: {err['msg']} (got {err.get('input')!r})")
    return ConfigError(f"{source}: " + "; ".join(lines))


def plugin_options(model: type[BaseModel], raw: dict | None, section: str):
    """``raw`` (a ``[plugins.<section>]`` table) validated as ``model``; on bad input a :class:`ConfigError`
    that names each key as ``plugins.<section>.<key>``, suggests the nearest known key for a misspelt one,
    and lists the known keys. The one way plugins report their options' errors."""
    try:
        return model.model_validate(dict(raw or {}))
    except ValidationError as exc:
        known = list(model.model_fields)
        lines = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            close = difflib.get_close_matches(loc, known, n=1, cutoff=0.5) if err["type"] == "extra_forbidden" else []
            lines.append(f"plugins.{section}.{loc}: {err['msg']}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ConfigError(f"[plugins.{section}]: " + "; ".join(lines) + f". Known keys: {', '.join(known)}") from None


def parse_override(item: str) -> tuple[list[str], Any]:
    """``loop.iterations=2`` -> (["loop", "iterations"], 2); values are TOML (strings may be bare)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set loop.iterations=2")
    key, raw = item.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare string such as --set roles.proposer.backend=openai
    return key.strip().split("."), value


def load_config(path: str | Path | None = None, overrides: list[str] = (), base: dict | None = None,
                profile: str | None = None) -> Config:
    """Read ``evolver.toml`` (when present), apply overrides, validate. Under the file: ``base`` (a resumed
    run's recorded configuration), else the profile ``profile`` names, else, where there is no file, the
    installed ``default`` profile (:func:`profile_data`)."""
    source = "defaults"
    if base is None and (profile is not None or path is None or not Path(path).exists()):
        base = profile_data(profile)
        source = f"profile {profile or 'default'!r}" if base else source
    data: dict[str, Any] = dict(base or {})
    if path is not None and Path(path).exists():
        source = str(path)
        try:
            data = _merge(data, tomllib.loads(Path(path).read_text()))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    elif path is not None and str(path) != "evolver.toml":
        raise ConfigError(f"config file {path} does not exist (create one with `evolver init`)")
    parsed = [(item, *parse_override(item)) for item in overrides]
    switched_to = [value for _, keys, value in parsed if keys == ["benchmark"]]
    if switched_to and switched_to[-1] != data.get("benchmark", Config.model_fields["benchmark"].default):
        # The file's (or the default's) benchmark options are that benchmark's: another one starts from
        # none, and only the overrides' benchmark_options apply to it.
        data["benchmark_options"] = {}
    for item, keys, value in parsed:
        cursor = data
        for k in keys[:-1]:
            cursor = cursor.setdefault(k, {})
            if not isinstance(cursor, dict):
                raise ConfigError(f"--set {item!r}: {k!r} is not a table")
        cursor[keys[-1]] = value
        source = f"{source} + overrides" if "overrides" not in source else source
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise _explain(exc, source) from None


def profile_data(name: str | None = None) -> dict:
    """The configuration of profile ``name`` (a plugin's ``register_profiles``); with no name, of the
    installed ``default`` profile, or ``{}`` (the core's own defaults) where no plugin offers one."""
    from evolver import plugins

    if name is None:
        if "default" not in plugins.registries()["profile"].entries:
            return {}
        name = "default"
    text = plugins.profile_text(name)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"profile {name!r} (plugin {plugins.get('profile', name).plugin}): not valid TOML: "
                          f"{exc}") from exc


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def dump_config(config: Config) -> dict:
    # Options may hold objects (a scripted rule in tests): store their repr rather than fail.
    return config.model_dump(mode="json", fallback=repr)


def check_config(config) -> None:
    """Every name a run's config gives (benchmark, each role's backend, selector, proposers, plugin
    option tables) resolves to an installed plugin, checked before any work, so a typo never surfaces after
    episodes played. (Here, not in :mod:`evolver.plugins`: ``auto`` resolves through a backend plugin.)"""
    from evolver import plugins
    from evolver.backends import auto
    from evolver.errors import UnknownNameError

    backends = [config.role(r).backend for r in ROLES]
    backends = [auto.local_engine() if b == "auto" else b for b in backends]
    wanted = [("benchmark", config.benchmark), *(("backend", b) for b in backends),
              *([("cluster", config.cluster.engine)] if config.cluster.engine != "local" else []),
              ("selector", config.loop.selector), *(("proposer", name) for name in config.proposers)]
    unknown = []
    for kind, name in dict.fromkeys(wanted):
        try:
            plugins.get(kind, name)
        except UnknownNameError as exc:
            unknown.append(exc)
    if len(unknown) > 1:  # say them all at once: a config without its plugins misses several
        first, rest = unknown[0], unknown[1:]
        also = ", ".join(f"{e.kind} {e.name!r}" + (f" (evolver-{plugins.FIRST_PARTY[e.kind, e.name]})"
                                                   if (e.kind, e.name) in plugins.FIRST_PARTY else "") for e in rest)
        raise UnknownNameError(first.kind, first.name, first.known,
                               f"{first.hint + '. ' if first.hint else ''}Also unknown: {also}")
    if unknown:
        raise unknown[0]
    plugins.check_benchmark(config.benchmark, config.benchmark_options)
    plugins.check_options(config.plugins)
