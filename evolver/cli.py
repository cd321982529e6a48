"""The ``evolver`` command line. Commands are thin: the logic lives in the core modules."""
from __future__ import annotations

import errno
import json
import os
import sys
import time
from pathlib import Path

import click

from evolver import plugins
from evolver.cli_programs import programs, skills
from evolver.config import Config, load_config
from evolver.errors import EvolverError, UnknownNameError
from evolver.report import latest_report, partial_report, rewrite, text_table
from evolver.workspace import DB_FILE, open_run, open_workspace


class Ctx:
    def __init__(self, config_path: str, overrides: list[str], store: str | None, profile: str | None = None):
        self.config_path, self.overrides, self.store_override = config_path, list(overrides), store
        self.profile = profile

    def config(self, extra: list[str] = ()) -> Config:
        overrides = self.overrides + list(extra)
        if self.store_override:
            overrides.append(f"store={json.dumps(self.store_override)}")
        return load_config(self.config_path, overrides, profile=self.profile)


class EvolverGroup(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except EvolverError as exc:
            click.secho(f"error: {exc}", fg="red", err=True)
            sys.exit(2)
        except OSError as exc:
            if exc.errno not in _DISK_FULL:
                raise
            where = f" writing {exc.filename}" if exc.filename else ""
            click.secho(f"error: the disk is full or over a quota{where} ({exc.strerror}). Free space there (or "
                        "choose a --store on a bigger disk); what was recorded before stays, and `evolver run "
                        "--resume` continues a run where it stopped", fg="red", err=True)
            sys.exit(2)


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


@click.group(cls=EvolverGroup)
@click.option("--config", "config_path", default="evolver.toml", show_default=True, help="Configuration file.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config key (repeatable).")
@click.option("--store", default=None, help="Workspace folder (default: the config's, 'store').")
@click.option("--profile", default=None, help="A configuration profile a plugin offers (`evolver plugins` lists "
              "them), under the config file; default: the installed 'default' profile where there is no file.")
@click.option("--plugin", "plugin_paths", multiple=True, type=click.Path(),
              help="Load a plugin from a file or folder (docs/plugins.md says what a folder loads).")
@click.version_option(package_name="evolver")
@click.pass_context
def cli(ctx, config_path, overrides, store, profile, plugin_paths):
    """evolver: an LLM agent improves itself on a benchmark."""
    try:
        for path in plugin_paths:
            plugins.load_local(path)
    except EvolverError as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(2)
    ctx.obj = Ctx(config_path, overrides, store, profile)


@cli.command()
@click.option("--force", is_flag=True, help="Overwrite an existing evolver.toml.")
@click.pass_obj
def init(obj: Ctx, force):
    """Write evolver.toml and create the workspace with its seed program."""
    from evolver.seeding import ensure_seed

    path = Path(obj.config_path)
    if path.exists() and not force:
        click.echo(f"{path} exists (use --force to overwrite); creating the workspace only")
    else:
        name = obj.profile or ("default" if "default" in plugins.registries()["profile"].entries else None)
        path.write_text(plugins.profile_text(name) if name else CORE_TOML)
        click.echo(f"wrote {path}" + (f" (profile {name!r})" if name else ""))
    config = obj.config()
    with open_run(config, "init", record=False) as run:  # no run row: init is not a run to list or resume
        program = ensure_seed(run)
    click.echo(f"workspace {config.store}: seed program {program.commit[:10]} in {config.store}/programs")


@cli.command(name="eval")
@click.option("--benchmark", default=None, help="Benchmark (default: the config's).")
@click.option("--suite", default=None, help="The benchmark's suite option (benchmark_options.suite).")
@click.option("--split", type=click.Choice(["train", "dev", "test"]), default="dev", show_default=True)
@click.option("--per-category", type=int, default=2, show_default=True, help="Tasks per category (at least 1).")
@click.option("--program", "program_ref", default="best", show_default=True,
              help="Program id, tag or commit (falls back to the seed when there is no 'best' yet).")
@click.option("--backend", default=None, help="Executor backend (default: the config's).")
@click.option("--model", default=None, help="Executor model, a HF folder, a .gguf file or a checkpoint.")
@click.option("--skills", "skills_modes", default="evolved", show_default=True,
              help="Skills condition(s), comma-separated: evolved (the program's), none, self (the model "
                   "writes its own in one shot). Several: a comparison with absolute and normalised gains.")
@click.option("--max-live", type=int, default=32, show_default=True, help="Episodes played at once (1 = serial).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config key (repeatable).")
@click.pass_obj
def eval_cmd(obj: Ctx, benchmark, suite, split, per_category, program_ref, backend, model, skills_modes, max_live,
             overrides):
    """Play one program on one benchmark split: a score table, every trace in the store."""
    from evolver.conditions import CONDITIONS, compare, gains_table
    from evolver.programs import ProgramRepo
    from evolver.progressbar import progress

    modes = [m.strip() for m in skills_modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in CONDITIONS]
    if bad or not modes:
        raise EvolverError(f"--skills {skills_modes!r}: choose from {', '.join(CONDITIONS)} (comma-separated)")
    if per_category < 1:
        raise EvolverError(f"--per-category {per_category}: play at least 1 task per category")
    extra = []
    if benchmark:  # another benchmark than the config's starts without the config's benchmark_options
        extra.append(f"benchmark={json.dumps(benchmark)}")
    if suite:
        extra.append(f"benchmark_options.suite={json.dumps(suite)}")
    if backend:
        extra.append(f"roles.executor.backend={json.dumps(backend)}")
    if model:
        extra.append(f"roles.executor.model={json.dumps(model)}")
    config = obj.config(extra + list(overrides))
    plugins.check_benchmark(config.benchmark, config.benchmark_options)  # before the run is recorded
    repo = ProgramRepo(Path(config.store))  # the program decides the model, so the config, before the run
    checkpoint = None if model else program_checkpoint(repo, program_ref, config)
    if checkpoint:  # a trained program carries its weights: play it with them
        extra.append(f"roles.executor.model={json.dumps(checkpoint)}")
        config = obj.config(extra + list(overrides))
        click.echo(f"model: {checkpoint} (the program's checkpoint)", err=True)
    started = time.perf_counter()
    with open_run(config, "eval-" + time.strftime("%Y%m%d-%H%M%S")) as run:
        store = run.store
        program = repo.checkout(program_ref_or_seed(repo, program_ref))
        tasks = run.benchmark.tasks(split, per_category=per_category)
        click.echo(f"playing {len(tasks)} {split} tasks of {config.benchmark} with program {program.id} "
                   f"(skills: {', '.join(modes)})", err=True)
        with progress("eval", total=len(tasks) * len(modes)) as bar:
            evals = compare(run, program, tasks, modes, max_live=max_live, progress=lambda d, t: bar.update(d, t))
        for ev in evals.values():
            store.add_evaluation(run.id, 0, ev)
        store.update_run(run.id, status="finished", summary={
            "eval": {c: ev.metrics() | {"per_category": ev.per_category} for c, ev in evals.items()},
            "wall_s": time.perf_counter() - started})
    if len(evals) == 1:
        ev = next(iter(evals.values()))
        click.echo(text_table(["category", "score"], [[c, f"{s:.3f}"] for c, s in ev.per_category.items()]
                              + [["all", f"{ev.score:.3f}"]]))
        click.echo(f"success {ev.success:.3f}  context tokens/episode {ev.context_tokens:.0f}  errors {ev.errors}  "
                   f"wall {time.perf_counter() - started:.1f}s")
    else:
        click.echo(text_table(["skills", "score", "success", "gain vs none", "normalised g", "context tokens"],
                              gains_table(evals)))
    first = next(iter(evals.values())).episodes[0].id[:8] if tasks else ""
    click.echo(f"traces: evolver traces --run {run.id}   (one: evolver traces --episode {first})")


def program_ref_or_seed(repo, ref: str) -> str:
    """``best`` before any run has tagged a best program means the seed."""
    return ref if ref != "best" or "best" in repo.tags("") else "seed"


def program_checkpoint(repo, ref: str, config: Config) -> str | None:
    """The checkpoint folder a program's manifest names (``model``, relative to the workspace), if any."""
    from evolver.run import checkpoint_path

    if not repo.exists:
        return None
    try:
        model = repo.manifest(program_ref_or_seed(repo, ref)).get("model")
    except EvolverError:
        return None
    return checkpoint_path(Path(config.store), model)


class TrainCommand(click.Command):
    """``evolver train`` plus ``--NAME`` for each registered trainer that asks for a flag (``Trainer.flag``).

    The flags join when the command parses or shows its help, after ``--plugin`` files loaded, so
    ``evolver --help`` loads no trainer."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        from evolver.trainers import flagged

        params = super().get_params(ctx)
        if "trainer_flags" not in ctx.meta:  # once per parse: click asks more than once
            try:
                entries = plugins.registries()["trainer"].entries
            except EvolverError:  # a broken plugin: the command says so when it asks for its trainer
                entries = {}
            taken = {opt for param in params for opt in param.opts}
            ctx.meta["trainer_flags"] = [
                click.Option([f"--{name}", f"trainer_flag_{i}"], is_flag=True, flag_value=name, default=None,
                             help=f"Trainer {name!r}: {entries[name].description or name} (= --trainer {name}).")
                for i, name in enumerate(flagged(entries.values())) if f"--{name}" not in taken]
        return params[:1] + ctx.meta["trainer_flags"] + params[1:]  # after --trainer, in the help too


@cli.command(cls=TrainCommand)
@click.option("--trainer", "trainer_name", default=None,
              help="A registered trainer (default: the config's `trainer`, else the first registered one "
                   "without a flag of its own; `evolver plugins` lists them).")
@click.option("--steps", type=int, default=None, help="Training steps (default: the trainer's option).")
@click.option("--program", "program_ref", default=None, help="Program whose skills and harness are used.")
@click.option("--resume", is_flag=True, help="Continue the latest unfinished training run from its last checkpoint.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config key (repeatable).")
@click.pass_obj
def train(obj: Ctx, trainer_name, steps, program_ref, resume, overrides, **trainer_flags):
    """Fine-tune the executor's model with a trainer, the program's skills in the prompt.

    Trainer options live under [plugins.NAME] (e.g. --set plugins.NAME.steps=8). Every step's
    metrics land in the store's train_steps table; the checkpoint is committed as a program."""
    from evolver.progressbar import progress
    from evolver.trainers import default_trainer, progress_note

    chosen = [name for name in trainer_flags.values() if name]
    said = [f"--{name}" for name in chosen] + [f"--trainer {trainer_name}"] * (trainer_name not in (None, *chosen))
    if len(said) > 1:
        raise EvolverError(f"{' and '.join(said)} name {'two' if len(said) == 2 else len(said)} trainers: "
                           "`evolver train` runs one at a time (run it once for each)")
    if chosen:
        trainer_name = chosen[0]
    elif not trainer_name:
        trainer_name = default_trainer(plugins.registries()["trainer"].entries.values(),
                                       obj.config(list(overrides)).trainer)
    extra = []
    if steps is not None:
        extra.append(f"plugins.{trainer_name}.steps={steps}")
    if program_ref:
        extra.append(f"plugins.{trainer_name}.program={json.dumps(program_ref)}")
    config = obj.config(extra + list(overrides))
    entry = plugins.get("trainer", trainer_name)
    if os.environ.get("RANK", "0") != "0":
        # A data-parallel rank under torchrun (docs/training.md): the store has one writer, rank 0, which
        # hands this rank its data; this one only computes gradients, with a run that opens no workspace.
        from evolver.run import Run

        run = Run(config, None, None, run_id=f"rank-{os.environ['RANK']}")
        try:
            entry.factory(run, run.config.plugins.get(trainer_name, {})).train(resume=resume)
        finally:
            run.close()
        return
    plugins.check_benchmark(config.benchmark, config.benchmark_options)  # the tasks it trains on, before the run
    started = time.perf_counter()
    unfinished = {"status": ("running", "failed"), "prefix": "train-"}
    with open_run(config, "train-" + time.strftime("%Y%m%d-%H%M%S"), resume=unfinished if resume else None,
                  nothing_to_resume="no unfinished training run to resume in this store; "
                                    "start one with `evolver train`") as run, \
            progress(trainer_name, unit="steps") as bar:
        store = run.store
        trainer = None

        def step_done(row: dict) -> None:  # the count of Trainer.total_steps, then the trainer's Trainer.columns
            bar.update(row.get("step", 0), getattr(trainer, "total_steps", None),
                       progress_note(getattr(trainer, "columns", ()), row))
        try:
            trainer = entry.factory(run, run.config.plugins.get(trainer_name, {}), progress=step_done)
            summary = trainer.train(resume=True) if resume else trainer.train()
        except BaseException:
            try:
                store.update_run(run.id, status="failed")
            except Exception:  # the store itself failed (a full disk): the run stays "running", and resumes too
                pass
            raise
        store.update_run(run.id, status="finished", summary={
            k: v for k, v in summary.items() if k != "history"} | {"wall_s": time.perf_counter() - started})
    for ev in summary.get("evals", []):
        click.echo(f"eval after step {ev['step']}: score {ev.get('score', 0):.3f}  success {ev.get('success', 0):.3f}")
    if summary.get("program"):
        click.echo(f"checkpoint {summary['checkpoint']} committed as program {summary['program']} "
                   f"(evolver eval --program {summary['program']})")
    click.echo(f"metrics: evolver traces \"SELECT step, metrics FROM train_steps WHERE run_id = '{run.id}'\"")


@cli.command()
@click.option("--resume", is_flag=True, help="Continue the latest unfinished run.")
@click.option("--proposer", "proposer_names", multiple=True, help="Proposer(s) to use (default: the config's).")
@click.option("--iterations", type=int, default=None)
@click.option("--cluster", "cluster_engine", default=None, metavar="ENGINE",
              help="Play episodes on a cluster engine (ray; [cluster] in the config sets its address and workers).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config key (repeatable).")
@click.pass_obj
def run(obj: Ctx, resume, proposer_names, iterations, cluster_engine, overrides):
    """Run the self-improvement loop, then evaluate the frontier on test and write a report."""
    from evolver.budget import BudgetExceeded
    from evolver.live_status import LiveStatus
    from evolver.loop import run_loop
    from evolver.run import LOOP_RUN_ID

    extra = []
    if proposer_names:
        extra.append(f"proposers={json.dumps(list(proposer_names))}")
    if iterations is not None:
        extra.append(f"loop.iterations={iterations}")
    if cluster_engine:
        extra.append(f"cluster.engine={json.dumps(cluster_engine)}")
    config = obj.config(extra + list(overrides))
    from evolver.sandbox import SandboxUnavailable, check_sandbox
    try:  # candidate code will run: refuse now, not after the seed has played, if it cannot be isolated
        check_sandbox()
    except SandboxUnavailable as exc:
        raise EvolverError(str(exc)) from None
    # A killed run is still "running"; one that stopped on an error is "failed", at a [budget] cap "stopped":
    # all resume, with any --set given now correcting the config they recorded (a larger budget).
    unfinished = {"status": ("running", "failed", "stopped"), "pattern": LOOP_RUN_ID}
    with open_run(config, resume=unfinished if resume else None, record=False,  # run_loop records and seeds
                  nothing_to_resume="no unfinished run to resume in this store; start one with `evolver run`",
                  corrections=obj.overrides + extra + list(overrides) if resume else ()) as r:
        try:
            with LiveStatus() as ui:
                r.console, r.ui = ui.console, ui
                summary = run_loop(r)
        except BudgetExceeded as exc:  # a cap the user set: the run ends here, resumable with a larger one
            r.store.update_run(r.id, status="stopped", summary={"stopped": str(exc), "tokens": dict(r.tokens),
                                                                    "spend": r.models.ledger.spend(),
                                                                    "estimate": r.estimate})
            click.secho(f"run {r.id} stopped at its budget: {exc}", fg="yellow", err=True)
            click.echo(partial_report(r.store, r.store.get_run(r.id)))
            return
        except Exception as exc:
            recorded = True
            try:
                recorded = r.store.get_run(r.id) is not None
                if recorded:
                    r.store.update_run(r.id, status="failed",
                                       summary={"error": f"{type(exc).__name__}: {exc}"[:4000]})
            except Exception:  # the store itself failed (a full disk): the run stays "running", and resumes too
                pass
            if recorded:
                click.secho(f"run {r.id} stopped: fix the cause, then `evolver run --resume` "
                            "(--set KEY=VALUE corrects its config)", fg="yellow", err=True)
            raise
    from evolver.report import label, paired_lines

    t = summary["test"]
    bon = summary.get("best_of_n")
    click.echo(f"baseline ({summary['baseline']}{label(summary, summary['baseline'])}) test score "
               f"{t[summary['baseline']]['score']:.3f}; "
               f"best ({summary['best']}{label(summary, summary['best'])}) {t[summary['best']]['score']:.3f}"
               + (f"; best of {bon['n']} {bon['test']['score']:.3f}" if bon else ""))
    for line in paired_lines(summary):
        click.echo(line)
    click.echo(f"report: {summary['report']}")


@cli.command(name="plugins")
def plugins_cmd():
    """List plugins with their versions, hooks and what they provide, each with its description."""
    for row in plugins.describe():
        click.echo(f"{row['name']}  [{row['package']} {row['version']}]")
        click.echo(f"    hooks: {', '.join(row['hooks'])}")
        if row["provides"]:
            click.echo("    provides:")
            width = max(len(p) for p in row["provides"])
            for provided in row["provides"]:
                described = row["descriptions"].get(provided) or ""
                click.echo(f"      {provided:<{width}}  {described}".rstrip())


cli.add_command(programs)
cli.add_command(skills)


@cli.command()
@click.argument("sql", required=False)
@click.option("--episode", default=None, help="Show one episode's trace (id or unique prefix).")
@click.option("--run", "run_id", default=None, help="List a run's episodes.")
@click.option("--limit", type=int, default=20, show_default=True)
@click.pass_obj
def traces(obj: Ctx, sql, episode, run_id, limit):
    """Query the trace store with SQL, or show an episode's trace readably."""
    # Read-only, with no file access beyond the store: a query can neither change the store nor read,
    # write or attach other files. Options are bound as parameters, never pasted into the SQL.
    with open_workspace(obj.config(), read_only=True)[0] as store:
        if episode:
            click.echo(store.format_episode(store.episode(episode)))
            return
        params: list = []
        if not sql:
            where = "WHERE run_id = ?" if run_id else ""
            params = ([run_id] if run_id else []) + [int(limit)]
            sql = ("SELECT substr(episode_id, 1, 8) AS episode, run_id, program_id, task_id, purpose, "
                   "round(score, 3) AS score, n_steps, prompt_tokens, error IS NOT NULL AS failed "
                   f"FROM episodes {where} ORDER BY created_at DESC LIMIT ?")
        cols, rows = store.query(sql, params)
    click.echo(text_table(cols, [[("" if v is None else str(v))[:60] for v in r] for r in rows]))


def _loop_run(store, run_id: str | None) -> dict | None:
    """The run ``run_id`` names, else the latest run ``evolver run`` started: never a proposer's training
    sub-run (``<run>-<operator>-it<N>``) or an ``evolver eval`` / ``train`` run, unless named."""
    from evolver.run import LOOP_RUN_ID

    row = store.get_run(run_id) if run_id else store.latest_run(pattern=LOOP_RUN_ID)
    if run_id and row is None:
        raise EvolverError(f"no run {run_id!r} in this store")
    return row


@cli.command()
@click.argument("run_id", required=False)
@click.pass_obj
def frontier(obj: Ctx, run_id):
    """The frontier of a run (default: the latest that `evolver run` started)."""
    with open_workspace(obj.config())[0] as store:
        row = _loop_run(store, run_id)
        if row is None:
            raise EvolverError("no run in this store yet: `evolver run` first")
        its = [i for i in store.iterations(row["run_id"]) if i["status"] == "finished"]
        data = (its[-1]["summary"] or {}).get("frontier") if its else (row.get("summary") or {}).get("frontier")
    if not data:
        raise EvolverError(f"run {row['run_id']} has no frontier recorded yet")
    objs = data["objectives"]
    rows = [[m["program_id"], *[f"{m['metrics'][o.split(':')[0]]:.3f}" for o in objs]] for m in data["members"]]
    gate = f", admission gate {data['gate']} {data.get('level', 0.95):.0%}" if data.get("gate", "none") != "none" else ""
    click.echo(f"run {row['run_id']} (capacity {data['capacity']}{gate})")
    click.echo(text_table(["program", *objs], rows))


@cli.command()
@click.argument("run_id", required=False)
@click.option("--open", "open_html", is_flag=True, help="Open the HTML report in the browser (evolver-ui writes it).")
@click.pass_obj
def report(obj: Ctx, run_id, open_html):
    """Print a run's report (default: the latest that `evolver run` started) and write its other formats
    again (HTML, with the evolver-ui plugin) from the store. A run that stopped before writing one gets a
    partial report of what it measured so far."""
    config = obj.config()
    if not (Path(config.store) / DB_FILE).exists():
        md = latest_report(config, run_id)
    else:
        with open_workspace(config, read_only=True)[0] as store:
            row = _loop_run(store, run_id)
            written = Path(config.store) / "reports" / f"{row['run_id']}.md" if row else None
            if row is not None and not written.exists():
                click.echo(partial_report(store, row))
                return
        md = written if written is not None else latest_report(config, run_id)
    click.echo(md.read_text())
    written = rewrite(obj.config(), md)
    for name, path in written.items():
        click.echo(f"{name}: {path}")
    if "html" not in written:
        try:
            plugins.get("report_format", "html")
        except UnknownNameError as exc:  # says which plugin brings it
            if open_html:
                raise
            click.echo(f"no HTML report: {exc.hint}", err=True)
    if open_html:
        import webbrowser

        webbrowser.open(written["html"].resolve().as_uri())


CORE_TOML = """\
# evolver configuration; every key is optional. `evolver --set KEY=VALUE` overrides any of them.
# No installed plugin offers a default profile, so this is the core's own: the zero-dependency
# `basic` benchmark. `evolver plugins` lists the benchmarks, backends and profiles installed.
benchmark = "basic"
store = "store"

[roles.executor]
backend = "auto"
"""


def main() -> None:
    cli()


for _register in (lambda: plugins.hook().register_commands(cli=cli),):
    try:
        _register()
    except EvolverError as _exc:  # a broken plugin must not take the CLI down with it
        click.secho(f"error: {_exc}", fg="red", err=True)


if __name__ == "__main__":
    main()
