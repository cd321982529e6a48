"""``evolver ui``: the workspace served as server-rendered pages (starlette, jinja2; no script, no URL outside
the page's own server), read-only.

Pages: ``/`` the runs; ``/run/{id}`` a run's plots, programs and proposals, and its live state while it
runs; ``/program/{id}`` a program's manifest, files, skills and episodes (``?category=&min_score=&max_score=
&run=&split=``); ``/diff?a=&b=`` two programs' diff; ``/skill/{name}`` a skill's versions across programs;
``/episode/{id}`` one episode's whole trace.

What it reads, and why it never blocks the run: the store through a :class:`evolver_ui.snapshot.Snapshot`
(a copy at most ``max_age_s`` old, since DuckDB lets one process open the file), the program repository
through git (which any number of readers share with a writer), and ``live/<run>.json``, which a running
run rewrites about once a second (:mod:`evolver.live`).
"""
from __future__ import annotations

import difflib
import ipaddress
import json
import os
import socket
import time
from contextlib import asynccontextmanager
from pathlib import Path

import jinja2
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from evolver import EvolverError, ProgramRepo, ProgramRepoError, ReportContext, Traces
from evolver_ui.data import collect
from evolver_ui.report import diff_lines, page
from evolver_ui.snapshot import Snapshot

#: Rows a page lists at most (the newest first): a long run has tens of thousands of episodes.
MAX_ROWS = 500
#: Characters of one diff or one file a page shows.
MAX_TEXT = 200_000
#: Versions of a skill whose text the skill page shows (the newest).
MAX_VERSIONS = 20
#: A live file not rewritten for this long belongs to a run that stopped without closing (killed).
STALE_S = 120


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class UI:
    """The pages of one workspace: each handler reads the snapshot and the repository and renders."""

    def __init__(self, workspace: str | Path, max_age_s: float = 5.0):
        self.workspace = Path(workspace).resolve()
        self.snapshot = Snapshot(self.workspace, max_age_s)
        self.repo = ProgramRepo(self.workspace)
        self.env = jinja2.Environment(loader=jinja2.PackageLoader("evolver_ui", "templates"), autoescape=True,
                                      trim_blocks=True, lstrip_blocks=True)
        self.env.filters["num"] = lambda v, f="%.3f": "" if v is None else f % v
        self._plots: dict[tuple, dict] = {}  # (run id, snapshot version) -> the run's plots

    def render(self, template: str, status: int = 200, **context) -> HTMLResponse:
        snap = self.snapshot
        taken = time.strftime("%H:%M:%S", time.localtime(snap.taken)) if snap.taken else None
        html = self.env.get_template(template).render(workspace=self.workspace, taken=taken, problem=snap.problem,
                                                  max_age=snap.max_age_s, **context)
        return HTMLResponse(html, status_code=status)

    def store(self):
        try:
            return self.snapshot.store()
        except EvolverError as exc:
            raise HTTPException(503, str(exc)) from None

    # -- pages ---------------------------------------------------------------------------------

    def runs(self, request: Request) -> HTMLResponse:
        _, rows = self.store().query("SELECT run_id, status, benchmark, created_at, updated_at, summary FROM runs "
                                     "ORDER BY created_at DESC, run_id DESC")
        runs = []
        for run_id, status, benchmark, created, updated, summary in rows:
            s = json.loads(summary) if isinstance(summary, str) else (summary or {})
            best = ((s.get("test") or {}).get(s.get("best")) or {}).get("score")
            runs.append({"id": run_id, "status": status, "benchmark": benchmark, "created": created,
                         "updated": updated, "best": s.get("best"), "best_test": best, "live": self.live(run_id)})
        known = {r["id"] for r in runs}
        newer = [live for live in self.all_live() if live["run_id"] not in known and live["alive"]]
        return self.render("ui_runs.html", runs=runs, newer=newer, refresh=any(r["live"] for r in runs) or newer)

    def run(self, request: Request) -> HTMLResponse:
        run_id = request.path_params["run_id"]
        store = self.store()
        row = store.get_run(run_id)
        # a run the store still calls running, but whose process went away, says so
        live = self.live(run_id, stale_too=row is None or row["status"] == "running")
        if row is None:
            if live is None:
                raise HTTPException(404, f"no run {run_id!r} in {self.workspace} (the store as of the "
                                         "snapshot, and no live state): see the runs page")
            return self.render("ui_run.html", run={"run_id": run_id, "status": "starting"}, live=live,
                               plots=None, programs=[], proposals=[], episodes=[], refresh=True)
        summary = row.get("summary") or {}
        plots = self.plots(store, run_id, summary)
        dev, members, status_of = plots.pop("dev_metrics"), plots.pop("members"), plots.pop("status_of")
        programs = [{**p, "dev": (dev.get(p["program_id"]) or {}).get("score"), "member": p["program_id"] in members,
                     "status": status_of.get(p["program_id"], "seed" if not p.get("parent_id") else "")}
                    for p in store.programs(run_id)]
        _, episodes = store.query("SELECT split, purpose, count(*), avg(score) FROM episodes WHERE run_id = ? "
                                  "GROUP BY ALL ORDER BY ALL", [run_id])
        alive = bool(live and live["alive"])
        return self.render("ui_run.html", run=row, summary=summary, live=live, plots=plots, programs=programs,
                           proposals=store.proposals(run_id), episodes=episodes, refresh=alive)

    def program(self, request: Request) -> HTMLResponse:
        program_id, q = request.path_params["program_id"], request.query_params
        store = self.store()
        run_id = q.get("run") or None
        row = store.get_program(program_id, run_id)
        try:
            commit = (row or {}).get("commit") or self.repo.resolve(program_id)
            manifest, files = self.repo.manifest(commit), self.repo.files(commit)
        except ProgramRepoError as exc:
            raise HTTPException(404, f"no program {program_id!r}: {exc}") from None
        filters = {"category": q.get("category") or None, "split": q.get("split") or None, "run": run_id,
                   "min_score": _score(q, "min_score"), "max_score": _score(q, "max_score")}
        where, params = ["program_id = ?"], [program_id]
        for col, op, key in (("category", "=", "category"), ("split", "=", "split"), ("run_id", "=", "run"),
                             ("score", ">=", "min_score"), ("score", "<=", "max_score")):
            if filters[key] is not None:
                where.append(f"{col} {op} ?")
                params.append(filters[key])
        _, episodes = store.query("SELECT episode_id, run_id, split, purpose, category, task_id, score, won, error, "
                                  f"created_at FROM episodes WHERE {' AND '.join(where)} "
                                  f"ORDER BY created_at DESC, rowid DESC LIMIT {MAX_ROWS + 1}", params)
        _, choices = store.query("SELECT DISTINCT category, split, run_id FROM episodes WHERE program_id = ?",
                                 [program_id])
        skills = sorted({p.split("/")[1] for p in files if p.startswith("skills/") and p.count("/") >= 2})
        return self.render("ui_program.html", program_id=program_id, commit=commit, row=row, manifest=manifest,
                           files={p: _cut(t) for p, t in files.items()}, skills=skills, filters=filters,
                           episodes=episodes[:MAX_ROWS], more=len(episodes) > MAX_ROWS,
                           categories=sorted({c[0] for c in choices if c[0]}),
                           splits=sorted({c[1] for c in choices if c[1]}),
                           runs=sorted({c[2] for c in choices if c[2]}))

    def diff(self, request: Request) -> HTMLResponse:
        a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
        lines = None
        if a and b:
            try:
                lines = diff_lines(_cut(self.repo.diff(a, b)))
            except ProgramRepoError as exc:
                raise HTTPException(404, str(exc)) from None
        known = [r["id"] for r in self.repo.log() if r.get("id")] if self.repo.exists else []
        return self.render("ui_diff.html", a=a, b=b, lines=lines, known=known)

    def skill(self, request: Request) -> HTMLResponse:
        name = request.path_params["name"]
        history = self.repo.skill_history(name)
        if not history:
            known = self.repo.skill_names()
            raise HTTPException(404, f"no program has a skill {name!r}; skills: {', '.join(known) or '(none)'}")
        versions, before = [], ""
        for h in history[-MAX_VERSIONS:]:
            text = "" if h["deleted"] else self.repo.files(h["commit"]).get(f"skills/{name}/SKILL.md", "")
            change = difflib.unified_diff(before.splitlines(), text.splitlines(), "before", h["id"], lineterm="")
            versions.append({**h, "text": text, "diff": diff_lines("\n".join(change))})
            before = text
        return self.render("ui_skill.html", name=name, history=history, versions=versions[::-1],
                           older=len(history) - len(versions))

    def episode(self, request: Request) -> HTMLResponse:
        episode_id = request.path_params["episode_id"]
        try:
            ep = self.store().episode(episode_id)
        except LookupError as exc:  # no such episode, or an ambiguous prefix
            raise HTTPException(404, str(exc)) from None
        return self.render("ui_episode.html", ep=ep, text=Traces.episode(ep),
                           steps=[{"step": s, "prompt": _prompt(s.prompt)} for s in ep.steps])

    async def error(self, request: Request, exc: Exception) -> HTMLResponse:
        code = getattr(exc, "status_code", 500)
        detail = getattr(exc, "detail", None) or str(exc)
        return self.render("ui_error.html", status=code, code=code, detail=detail)

    # -- what the pages share ------------------------------------------------------------------

    def plots(self, store, run_id: str, summary: dict) -> dict:
        """The run's plots and the rows behind its tables, drawn once per snapshot."""
        key = (run_id, self.snapshot.version)
        if key not in self._plots:
            data = collect(ReportContext(run_id, summary, store, self.repo, self.workspace / "reports"))
            if not data.members:  # a run still going: the frontier its last finished iteration left
                finished = [i for i in store.iterations(run_id) if i.get("frontier")]
                data.members = list(finished[-1]["frontier"]) if finished else []
            out = page(data)
            out.update(dev_metrics=data.dev_metrics, members=set(data.members),
                       status_of={c.id: c.status for c in data.candidates})
            self._plots = {k: v for k, v in self._plots.items() if k[1] == key[1]}
            self._plots[key] = out
        return dict(self._plots[key])

    def live(self, run_id: str, stale_too: bool = False) -> dict | None:
        """The run's published live state while it runs (with ``alive`` and ``age_s``); None when it
        published none, or (unless ``stale_too``) when it is not running now."""
        try:
            doc = json.loads((self.workspace / "live" / f"{run_id}.json").read_text())
        except (OSError, ValueError):
            return None
        return _alive(doc) if (stale_too or _alive(doc)["alive"]) else None

    def all_live(self) -> list[dict]:
        out = []
        for path in sorted((self.workspace / "live").glob("*.json")):
            doc = self.live(path.stem)
            if doc is not None:
                out.append(doc)
        return out


def _alive(doc: dict) -> dict:
    age = time.time() - float(doc.get("updated") or 0)
    running = doc.get("state") == "running"
    if running and doc.get("host") == socket.gethostname():
        try:
            os.kill(int(doc.get("pid") or 0), 0)
        except ProcessLookupError:
            running = False
        except (PermissionError, ValueError, OverflowError):
            pass
    return {**doc, "age_s": age, "alive": running and age < STALE_S}


def _score(q, key: str) -> float | None:
    text = q.get(key) or ""
    if not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        raise HTTPException(400, f"{key} must be a number, not {text!r}") from None


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"\n... ({len(text) - MAX_TEXT} more characters)"


def _prompt(prompt: str) -> list[dict] | None:
    """Chat messages when the prompt is JSON messages (as the store keeps them), else None."""
    try:
        msgs = json.loads(prompt)
    except (TypeError, ValueError):
        return None
    if isinstance(msgs, list) and all(isinstance(m, dict) and "content" in m for m in msgs):
        return [{"role": m.get("role", "?"), "content": str(m["content"])} for m in msgs]
    return None


def make_app(workspace: str | Path, max_age_s: float = 5.0, allowed_hosts: list[str] | None = None) -> Starlette:
    """The ui's ASGI app for one workspace; the snapshot's copy is removed when the app shuts down.
    ``allowed_hosts``: the only ``Host`` headers answered (None: any), so that a web page whose name is made
    to resolve to 127.0.0.1 (DNS rebinding) cannot read the traces through the visitor's browser."""
    ui = UI(workspace, max_age_s)

    @asynccontextmanager
    async def lifespan(app):
        yield
        ui.snapshot.close()

    routes = [Route("/", ui.runs), Route("/run/{run_id}", ui.run), Route("/program/{program_id}", ui.program),
              Route("/diff", ui.diff), Route("/skill/{name}", ui.skill), Route("/episode/{episode_id}", ui.episode)]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)] if allowed_hosts else []
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware,
                    exception_handlers={HTTPException: ui.error, EvolverError: ui.error})
    app.state.ui = ui
    return app


def serve(workspace: str | Path, host: str = "127.0.0.1", port: int = 8765, allow_remote: bool = False,
          max_age_s: float = 5.0, log_level: str = "warning") -> None:
    """Serve ``workspace`` until interrupted. A host other than loopback needs ``allow_remote``: traces can
    hold prompts, keys a model echoed, anything a task held, and the pages have no login."""
    if not is_loopback(host) and not allow_remote:
        raise EvolverError(f"refusing to serve on {host}: traces may hold secrets and the ui has no login. "
                           "Use 127.0.0.1 (an SSH tunnel reaches it from elsewhere: ssh -L 8765:127.0.0.1:8765 "
                           "HOST), or pass --allow-remote to serve on that address anyway")
    import uvicorn

    # On loopback, answer only the names of loopback (an IPv6 Host header does not parse there: any then).
    allowed = ["127.0.0.1", "localhost"] if host in ("127.0.0.1", "localhost") else None
    uvicorn.run(make_app(workspace, max_age_s, allowed), host=host, port=port, log_level=log_level)
