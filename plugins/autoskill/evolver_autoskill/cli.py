"""The plugin's commands: ``evolver serve`` and ``evolver autoskill show|history|usage|retire|learn``."""
from __future__ import annotations

import json
from pathlib import Path

import click

from evolver import EvolverError


def _workspace(obj, extra: list[str] = ()):
    """``(config, workspace folder, its trace store)``: these commands need no program repository."""
    from evolver import open_workspace

    config = obj.config(list(extra))
    store, _ = open_workspace(config)
    return config, Path(config.store), store


def _backend(config, role: str, cache: dict):
    """Roles naming the same backend share one instance (one copy of the weights) behind one lock."""
    from evolver import make_plugin
    from evolver_autoskill.serve import LockedBackend

    rc = config.role(role)
    key = (rc.backend, rc.model, json.dumps(rc.options, sort_keys=True, default=repr))
    if key not in cache:
        cache[key] = LockedBackend(make_plugin("backend", rc.backend, model=rc.model, **rc.options))
    return cache[key]


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True, help="0 picks a free port.")
@click.option("--backend", default=None, help="Answering backend (default: the config's executor role).")
@click.option("--model", default=None, help="Model for that backend.")
@click.option("--bare", is_flag=True, help="No skills: serve the backend alone (for comparisons).")
@click.option("--no-learn", is_flag=True, help="Retrieve and inject, but extract no new skills.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config key (repeatable).")
@click.pass_obj
def serve(obj, host, port, backend, model, bare, no_learn, overrides):
    """OpenAI-compatible chat server with AutoSkill: rewrite, retrieve, inject, answer, learn.

    With API keys (plugins.autoskill.keys or keys_file) each key reaches only its own scopes; without
    any, the server is open and listens on a loopback address only."""
    from evolver import make_plugin, open_workspace, progress
    from evolver_autoskill.auth import check_exposure, load_keys
    from evolver_autoskill.options import load_options
    from evolver_autoskill.request import Limits
    from evolver_autoskill.serve import Server, build_app
    from evolver_autoskill.service import AutoSkillService

    extra = list(overrides)
    if backend:
        extra.append(f"roles.executor.backend={json.dumps(backend)}")
    if model:
        extra.append(f"roles.executor.model={json.dumps(model)}")
    config = obj.config(extra)
    options = load_options(config)
    keys = load_keys(options)
    check_exposure(host, keys)  # before the store, the model or the embedder load
    store, _ = open_workspace(config)
    root = Path(config.store)
    if no_learn:
        options.learn = False
    backends: dict = {}
    service = None
    try:
        uses_judge = bool(options.judge or "llm" in (options.extractor, options.rewriter))
        gated = bool(options.gate_benchmark) and not bare
        # Start-up stages, each shown as it begins: loading a model (or fetching the embedded one) takes a while.
        with progress("evolver serve start-up", total=3 + uses_judge + gated, unit="stages", every=0,
                      eta=False) as start:
            start.update(0, note="loading the answering model")
            answer = _backend(config, "executor", backends)
            judge = gate = None
            if uses_judge:
                start.update(start.done + 1, note="loading the judge model")
                judge = _backend(config, "judge", backends)
            if gated:
                from evolver_autoskill.gate import BenchmarkValidator, OutcomeGate

                start.update(start.done + 1, note=f"loading the gate's tasks ({options.gate_benchmark})")
                bench = make_plugin("benchmark", options.gate_benchmark)
                tasks = bench.tasks(options.gate_split, per_category=options.gate_per_category)
                gate = OutcomeGate(BenchmarkValidator(bench, answer, tasks), options.gate_tolerance)
            start.update(start.done + 1, note="opening the skill banks and the embedder")
            service = AutoSkillService(root / "autoskill", store, options, judge_backend=judge, gate=gate)
            name = config.role("executor").model or answer.model or config.role("executor").backend
            app = build_app(service, answer, name, options.max_batch, options.batch_wait_ms / 1000,
                            autoskill=not bare, keys=keys, limits=Limits.from_options(options))
            start.update(start.done + 1, note=f"binding {host}:{port}")
            try:
                server = Server(app, host, port)
            except OSError as exc:
                raise EvolverError(str(exc)) from None
            start.update(start.done + 1, note="ready")
        mode = "bare backend, no skills" if bare else f"skill banks in {root / 'autoskill'}"
        mode += f"; API keys: {len(keys)}" if keys else "; open: no API keys, loopback only"
        click.echo(f"evolver serve: listening on {server.url} (model {name}; {mode}); Ctrl-C stops", err=False)
        _serve_until_signal(server)
        app.state.batcher.close()
    finally:
        if service is not None:
            service.close()  # lets queued extractions finish, so no learned skill is lost
        for b in backends.values():
            b.close()
        store.close()
    click.echo("evolver serve: stopped")


class _Stop(Exception):
    pass


def _serve_until_signal(server) -> None:
    """uvicorn finishes open requests on SIGINT/SIGTERM and then re-raises the signal; turn that into a
    normal return, so the caller's cleanup (drain extraction, close the store) runs on either signal."""
    import signal

    def stop(signum, frame):
        raise _Stop()
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        server.run()
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.group(name="autoskill")
def autoskill_group():
    """Inspect and maintain AutoSkill banks (one git repository per user scope)."""


def _bank(root: Path, scope: str):
    from evolver_autoskill.bank import SkillBank, scope_folder

    if not (root / "autoskill" / scope_folder(scope) / ".git").exists():
        raise EvolverError(f"no skill bank for scope {scope!r} under {root / 'autoskill'}: it is created by "
                           "`evolver serve` on the scope's first request (or `evolver autoskill learn`)")
    return SkillBank(root / "autoskill", scope)


@autoskill_group.command()
@click.option("--scope", default="default", show_default=True)
@click.pass_obj
def show(obj, scope):
    """Every skill of a scope with its version, triggers and tags."""
    bank = _bank(Path(obj.config().store), scope)
    for card in bank.cards():
        click.echo(f"{card.name}  v{card.version}{'  [always on]' if card.always_on else ''}\n"
                   f"    {card.description}\n    triggers: {', '.join(card.triggers)}  tags: {', '.join(card.tags)}")
    click.echo(f"{len(bank.cards())} skills in {bank.path}")


@autoskill_group.command()
@click.argument("skill")
@click.option("--scope", default="default", show_default=True)
@click.pass_obj
def history(obj, skill, scope):
    """A skill's commits (its version chain) with their evidence."""
    for row in _bank(Path(obj.config().store), scope).history(skill):
        click.echo(f"{row['commit'][:10]}  {row['subject']}  evidence: {', '.join(row['evidence']) or '-'}")


@autoskill_group.command()
@click.option("--scope", default="default", show_default=True)
@click.pass_obj
def usage(obj, scope):
    """Per skill: times retrieved, injected, and mean outcome with vs without it."""
    from evolver_autoskill import records

    _, _, store = _workspace(obj)
    with store:
        rows = records.usage(store, scope)
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    click.echo("skill  retrieved  injected  with(n)  without(n)")
    for r in rows:
        click.echo(f"{r['skill']}  {r['retrieved']}  {r['injected']}  {fmt(r['with_score'])}({r['with_n']})  "
                   f"{fmt(r['without_score'])}({r['without_n']})")


@autoskill_group.command()
@click.option("--scope", default="default", show_default=True)
@click.option("--min-uses", type=int, default=5, show_default=True)
@click.pass_obj
def retire(obj, scope, min_uses):
    """Retire skills retrieved often whose outcomes are no better with them than without (a commit each)."""
    from evolver_autoskill.gate import retire_useless

    _, root, store = _workspace(obj)
    with store:
        done = retire_useless(_bank(root, scope), store, min_uses=min_uses)
    for name, commit in done:
        click.echo(f"retired {name} ({commit[:10]})")
    click.echo(f"{len(done)} skill(s) retired")


@autoskill_group.command()
@click.option("--run", "run_id", required=True, help="Run whose training episodes to distil.")
@click.option("--scope", default=None, help="Bank to write (default: run-<run id>).")
@click.option("--min-score", type=float, default=0.8, show_default=True)
@click.pass_obj
def learn(obj, run_id, scope, min_score):
    """Extract skills from a run's successful *training* episodes into a bank (add / merge / discard)."""
    from evolver_autoskill.bank import SkillBank
    from evolver import load_embedder
    from evolver_autoskill.options import load_options
    from evolver_autoskill.service import learn_from_episodes

    config, root, store = _workspace(obj)
    options = load_options(config)
    bank = SkillBank(root / "autoskill", scope or f"run-{run_id}")
    with store:
        episodes = store.episodes(run_id=run_id, split="train", min_score=min_score, with_steps=True)
        counts = learn_from_episodes(store, bank, load_embedder(options.embedder), episodes, min_score, options)
    click.echo(f"{len(episodes)} training episodes scoring >= {min_score}: {counts or 'no candidates'}; "
               f"bank {bank.path} holds {len(bank.cards())} skills")
