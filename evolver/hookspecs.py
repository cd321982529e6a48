"""Every extension point of evolver. A hook's docstring is its contract.

Registration hooks are handed a ``register`` callback instead of returning lists, so the host can
grow new keyword arguments and handle duplicate names in one place. Implementations may accept
fewer arguments than a spec declares, so specs can grow without breaking plugins.
"""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("evolver")
hookimpl = pluggy.HookimplMarker("evolver")


@hookspec
def register_benchmarks(register):
    """Register benchmarks.

    :param register: ``register(name, factory, description="")``; ``factory(**options)`` returns a
        :class:`evolver.benchmarks.base.Benchmark`. The options (the config's ``benchmark_options``) are
        the factory's named parameters, checked before any work, an unknown one an error naming the
        closest; a factory taking ``**options`` accepts any. ``description`` is what ``evolver plugins`` shows.
    """


@hookspec
def register_backends(register):
    """Register model backends.

    :param register: ``register(name, factory, description="")``; ``factory(model=None, **options)``
        returns a :class:`evolver.backends.base.Backend`.
    """


@hookspec
def register_proposers(register):
    """Register proposers (EvoSkill, Meta-Harness, ...).

    :param register: ``register(name, factory, description="")``; ``factory(run, **options)`` returns an
        object with ``propose(ctx) -> list[Draft]`` (``evolver.Proposer``; see :mod:`evolver.proposers`),
        and ``needs_failures = False`` where it should be asked in an iteration whose rollouts all passed.
    """


@hookspec
def register_trainers(register):
    """Register policy trainers (GRPO, SFT, ...) for ``evolver train --trainer NAME``.

    :param register: ``register(name, factory, description="")``; ``factory(run, options, progress=None)``
        returns an object whose ``train()`` returns a summary dict (``program``: the id of the program
        committed with the new checkpoint, ``checkpoint``: its folder, ``evals``: held-out scores).
        ``options`` is the config's ``[plugins.NAME]`` table; ``progress(row)`` is called per step.
        Register the :class:`evolver.Trainer` subclass itself as the factory: ``evolver train`` reads
        its ``flag`` (True: ``evolver train --NAME``) and ``columns`` (its progress line) from it, and
        ``total_steps`` (what its progress counts to) from the trainer.
    """


@hookspec
def register_harnesses(register):
    """Register harness implementations a new workspace's seed program can start from (config key
    ``harness = "NAME"``, default ``"default"``).

    :param register: ``register(name, source_path, description="")``: the path of a Python file that
        defines ``class Harness`` (see :mod:`evolver.harness`).
    """


@hookspec
def register_migrations(register):
    """Register the plugin's own tables in the run store, as numbered migrations. A store applies the
    ones it has not recorded, in order, each in one transaction with its record, whenever it opens
    with the plugin loaded (old stores upgrade on their next writable open).

    :param register: ``register(plugin, migrations)``: ``plugin`` is the key the store records them
        under (the plugin's entry-point name; keep it stable: a new key runs them again), ``migrations``
        a list of functions ``mNNN_description(con)`` numbered from 001 that take the DuckDB
        connection. A released migration is never edited: a change is a new number. The plugin
        writes its tables with :meth:`evolver.Store.execute` and reads them with ``Store.query``.
    """


@hookspec
def register_clusters(register):
    """Register cluster engines for ``[cluster] engine = NAME`` (``evolver run --cluster NAME``).

    Call ``register(name, factory, description)``; ``factory(config)`` (the run's :class:`evolver.config.Config`)
    returns an :class:`evolver.Cluster`: it plays units (:class:`evolver.remote.Unit`) on its workers with
    :class:`evolver.remote.Worker` and yields each finished episode once; the driver stores them.
    """


@hookspec
def register_selectors(register):
    """Register parent-selection strategies.

    :param register: ``register(name, factory, description="")``; ``factory()`` returns a callable
        ``select(frontier, iteration, history) -> member``.
    """


@hookspec
def register_report_formats(register):
    """Register report formats written beside a run's Markdown report (``store/reports/RUN.md``): when the
    run finishes, and again by ``evolver report`` (``evolver report --open`` opens the ``html`` one).

    :param register: ``register(name, write, description="")``; ``write(report)`` writes the file into
        ``report.folder`` and returns its path. ``report`` is an :class:`evolver.ReportContext`: the run's
        id and summary, its store (read it only) and program repository. A failure at the end of a run is
        logged and the run still finishes; ``evolver report`` shows it as an error.
    """


@hookspec
def register_profiles(register):
    """Register configuration profiles: a whole ``evolver.toml``, a benchmark and a way of running it.
    The one named ``default`` is the configuration of ``evolver run`` and ``evolver init`` where there is
    no ``evolver.toml`` (``evolver --profile NAME`` picks another): the core itself names no benchmark.

    :param register: ``register(name, toml, description="")``: ``toml`` is the configuration's text,
        comments included (``evolver init`` writes it as it is), or a callable that returns it.
    """


@hookspec
def register_commands(cli):
    """Add click commands to the ``evolver`` CLI.

    :param cli: the root :class:`click.Group`.
    """


@hookspec(firstresult=True)
def select_skills(run, task, program, skills, k):
    """Choose which skill bodies to inject into a task's context (first non-None answer wins).

    :param run: the run context (may be None outside a run).
    :param task: the :class:`evolver.types.Task` being played.
    :param program: the :class:`evolver.types.Program` being evaluated.
    :param skills: every :class:`evolver.skills.Skill` the program holds.
    :param k: how many bodies the harness has room for.
    :return: a list of skills (at most ``k``), or None to defer to the next plugin / the default.
    """


@hookspec
def on_run_start(run):
    """A run starts (or resumes: ``run.resumed`` is True)."""


@hookspec
def on_episode_end(run, episode):
    """An episode finished (cached episodes included: ``episode.cached``)."""


@hookspec
def on_candidate(run, candidate, outcome):
    """A candidate changed state.

    :param outcome: ``"proposed"``, ``"rejected"``, ``"evaluated"``, ``"admitted"`` or ``"discarded"``;
        ``candidate.reason`` says why for rejections.
    """


@hookspec
def on_frontier_changed(run, frontier):
    """The frontier admitted or evicted a member. :param frontier: the :class:`evolver.frontier.Frontier`."""


@hookspec
def on_iteration_end(run, iteration, summary):
    """An iteration of the loop finished and is stored (a resumed run does not replay finished ones).

    :param iteration: its number, from 0.
    :param summary: dict: ``parent`` (the program it started from), ``train_score`` (the parent's mean
        score on the iteration's training rollouts), ``failures``, ``candidates`` and ``admitted`` (ids),
        ``frontier`` (``Frontier.to_dict()``), and ``note`` when it had no failures (skipped, or
        only the proposers that need none asked).
    """


@hookspec
def on_train_step(run, step, metrics):
    """A trainer recorded a step (``Run.add_train_steps``), already in the store's ``train_steps`` table.

    :param run: the training run: ``evolver train``'s own, or inside a loop run ``RUN-<operator>-it<N>``.
    :param step: the step number.
    :param metrics: dict of the step's metrics (e.g. ``loss``, ``reward_mean``; values may be nested dicts).
    """


@hookspec
def on_run_end(run, summary):
    """A run finished. :param summary: dict with the final test scores and counts."""
