"""`evolver ui`: every page of a finished toy run through starlette's TestClient (each serves what it should,
filters narrow the episodes, unknown ids are a 404 that says why), a store a run holds open still served from
a copy, a running run's live state, and a non-loopback host refused."""
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from evolver import Store
from evolver.errors import StoreLockedError

from evolver_ui.server import is_loopback, make_app

TOY = Path(__file__).resolve().parents[3] / "tests" / "toybench.py"


@pytest.fixture
def workspace(finished_run, tmp_path):
    """A copy of the finished run's workspace, so a test may add to it."""
    store, run_id = finished_run
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    return copy, run_id


@pytest.fixture
def client(workspace):
    with TestClient(make_app(workspace[0], max_age_s=0)) as c:
        yield c


def links(html: str, kind: str) -> list[str]:
    return re.findall(rf'href="(/{kind}/[^"?]+)', html)


def test_the_runs_page_lists_the_run_and_says_how_old_the_copy_is(client, workspace):
    r = client.get("/")
    assert r.status_code == 200
    assert f'href="/run/{workspace[1]}"' in r.text and "finished" in r.text
    assert re.search(r"store as of \d\d:\d\d:\d\d", r.text)
    assert not re.search(r"https?://(?!www\.w3\.org)", r.text)  # nothing fetched from elsewhere
    assert "<script" not in r.text


def test_a_run_page_has_its_plots_programs_and_proposals(client, workspace):
    html = client.get(f"/run/{workspace[1]}").text
    for plot in ("dev-scores", "frontier", "lineage", "categories"):
        assert f'data-plot="{plot}"' in html, plot
    assert "<use " in html  # markers drawn
    assert set(links(html, "program")) >= {"/program/seed", "/program/p0001", "/program/p0002", "/program/p0003"}
    assert 'href="/diff?a=seed&amp;b=p0001"' in html
    assert "toggle the shouting skill" in html and "admitted" in html and "rejected" in html
    assert 'id="live"' not in html and 'http-equiv="refresh"' not in html  # finished: nothing live


def test_a_program_page_shows_its_manifest_files_skills_and_episodes(client, workspace):
    html = client.get(f"/program/p0001?run={workspace[1]}").text
    assert 'href="/skill/shout-words"' in html and "skills/shout-words/SKILL.md" in html
    assert "Answer with the word in UPPERCASE letters." in html  # the file's text
    assert "create" in html and 'href="/diff?a=seed&amp;b=p0001"' in html
    episodes = links(html, "episode")
    assert episodes


def test_the_episode_filters_narrow_by_category_and_score(client, workspace):
    def rows(query: str) -> list[tuple[str, float]]:
        html = client.get(f"/program/seed?{query}").text
        table = html[html.index('id="episode-list"'):]
        table = table[:table.index("</table>")]
        return [(cat, float(score)) for cat, score in re.findall(
            r"<td>[^<]*</td>\s*<td>([^<]*)</td><td>[^<]*</td><td class=\"num\">([0-9.]+)</td>", table)]

    every = rows("")
    categories = {c for c, _ in every}
    assert len(categories) >= 2 and {s for _, s in every} >= {0.0}
    one = sorted(categories)[0]
    assert rows(f"category={one}") and {c for c, _ in rows(f"category={one}")} == {one}
    assert all(s >= 0.5 for _, s in rows("min_score=0.5"))
    assert all(s <= 0.5 for _, s in rows("max_score=0.5")) and rows("max_score=0.5")
    assert len(rows("min_score=0.5")) + len(rows("max_score=0.49")) == len(every)
    bad = client.get("/program/seed?min_score=lots")
    assert bad.status_code == 400 and "min_score must be a number" in bad.text


def test_the_diff_page_shows_what_a_program_changed(client):
    html = client.get("/diff?a=seed&b=p0001").text
    assert '<span class="add">+name: shout-words</span>' in html
    assert 'id="diff"' not in client.get("/diff").text  # no programs named yet: the form only


def test_a_skill_page_shows_its_versions_across_programs(client):
    html = client.get("/skill/shout-words").text
    assert 'href="/program/p0001"' in html and 'href="/program/p0002"' in html
    assert "deleted" in html  # p0002 swapped it out
    assert "Answer with the word in UPPERCASE letters." in html


def test_an_episode_page_shows_the_whole_trace(client, workspace):
    store = Store(workspace[0] / "evolver.duckdb", read_only=True)
    try:
        ep = next(e for e in store.episodes(run_id=workspace[1], with_steps=True) if e.steps)
    finally:
        store.close()
    html = client.get(f"/episode/{ep.id}").text
    step = ep.steps[0]
    for text in (ep.task.id, step.action, step.observation.splitlines()[0], f"/program/{ep.program_id}"):
        assert str(text).replace("'", "&#39;").replace('"', "&#34;") in html, text
    assert 'id="step-0"' in html and 'id="trace-text"' in html
    assert client.get(f"/episode/{ep.id[:10]}").status_code == 200  # a unique prefix is enough


@pytest.mark.parametrize("path, says", [
    ("/run/no-such-run", "no run 'no-such-run'"),
    ("/program/p9999", "no program 'p9999'"),
    ("/episode/zzzz", "no episode with id 'zzzz'"),
    ("/skill/no-such-skill", "no program has a skill 'no-such-skill'; skills: "),
    ("/diff?a=seed&b=p9999", "unknown program or ref 'p9999'"),
])
def test_unknown_ids_are_a_404_that_says_why(client, path, says):
    r = client.get(path)
    assert r.status_code == 404 and says.replace("'", "&#39;") in r.text


HOLD = textwrap.dedent("""
    import sys
    from evolver import Store
    store = Store(sys.argv[1])
    store.create_run("written-while-served", "upper", {})
    print("ready", flush=True)
    sys.stdin.readline()
    store.close()
""")


def test_a_store_a_run_is_writing_is_served_from_a_copy(client, workspace):
    db = workspace[0] / "evolver.duckdb"
    writer = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=os.environ)
    try:
        assert writer.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLockedError):  # locked: even a reader could not open it
            Store(db, read_only=True)
        r = client.get("/")  # max_age_s=0: copies the file now, while it is held
        assert r.status_code == 200 and 'href="/run/written-while-served"' in r.text
        assert client.get(f"/run/{workspace[1]}").status_code == 200
    finally:
        writer.communicate("\n", timeout=30)
    assert writer.returncode == 0  # the ui never kept the run from writing or closing


def test_the_copy_lives_in_a_folder_made_at_the_first_request_and_removed_at_close(workspace):
    from evolver_ui.snapshot import Snapshot

    snap = Snapshot(workspace[0], max_age_s=0)
    assert snap.folder is None  # an app that is never served makes nothing
    snap.store()
    folder = snap.folder
    assert folder.is_dir() and list(folder.glob("copy-*.duckdb"))
    snap.close()
    assert not folder.exists() and snap.folder is None
    snap.close()  # twice is harmless


def test_the_ui_serves_a_run_as_it_writes_and_never_stops_it(tmp_path):
    """A real `evolver run` in its own process, slowed down, while the ui serves it from copies."""
    args = ["--plugin", str(TOY), "--store", str(tmp_path / "store"), "--set=benchmark=upper",
            "--set=benchmark_options={}",
            '--set=proposers=["evoskill"]', "--set=roles.executor.options={delay = 0.05}",
            *(f"--set=roles.{r}.backend=toyrule" for r in ("executor", "proposer", "builder", "judge"))]
    proc = subprocess.Popen([sys.executable, "-m", "evolver.cli", *args, "run", "--iterations", "2"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen, deadline = set(), time.time() + 240
    try:
        with TestClient(make_app(tmp_path / "store", max_age_s=0)) as client:
            while proc.poll() is None and time.time() < deadline:
                runs = client.get("/")
                assert runs.status_code in (200, 503), runs.text  # 503: no store yet
                for run_id in set(re.findall(r'href="/run/([^"]+)"', runs.text)):
                    page = client.get(f"/run/{run_id}")
                    assert page.status_code == 200, page.text
                    seen |= {word for word in ("Running now", 'data-plot="lineage"') if word in page.text}
                time.sleep(0.2)
    finally:
        try:
            out = proc.communicate(timeout=120)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, out[-3000:]
    assert seen == {"Running now", 'data-plot="lineage"'}


def test_a_running_run_shows_its_live_state(client, workspace):
    live = workspace[0] / "live" / f"{workspace[1]}.json"
    doc = json.loads(live.read_text())  # the loop published it; closing the run marked it closed
    assert doc["state"] == "closed" and doc["run_id"] == workspace[1]
    doc.update(state="running", pid=os.getpid(), updated=time.time(), status="iteration 1: evaluating 2 candidates",
               iteration=1)
    live.write_text(json.dumps(doc))
    html = client.get(f"/run/{workspace[1]}").text
    assert "Running now" in html and "iteration 1: evaluating 2 candidates" in html
    assert 'http-equiv="refresh"' in html  # the page reloads itself while the run goes on
    assert "iteration 1/2: iteration 1: evaluating" in client.get("/").text
    doc["updated"] = time.time() - 3600  # an hour without an update: not running any more
    live.write_text(json.dumps(doc))
    assert 'id="live"' not in client.get(f"/run/{workspace[1]}").text  # and the store says it finished


def test_a_run_the_copy_does_not_hold_yet_shows_its_live_state(client, workspace):
    live = workspace[0] / "live" / "20990101-000000-abcd.json"
    live.write_text(json.dumps({"run_id": "20990101-000000-abcd", "pid": os.getpid(), "host": os.uname().nodename,
                                "state": "running", "status": "seed on dev", "iteration": -1, "iterations": 3,
                                "started": time.time(), "updated": time.time(), "elapsed_s": 3.0, "tokens": {},
                                "frontier": []}))
    assert 'href="/run/20990101-000000-abcd"' in client.get("/").text
    r = client.get("/run/20990101-000000-abcd")
    assert r.status_code == 200 and "seed on dev" in r.text and "Running now" in r.text
    doc = json.loads(live.read_text())
    doc["pid"] = 2 ** 22 + 1  # above Linux's largest pid: that process is gone (killed)
    live.write_text(json.dumps(doc))
    assert "Stopped without closing" in client.get("/run/20990101-000000-abcd").text
    assert "20990101-000000-abcd" not in client.get("/").text


def test_a_non_loopback_host_is_refused_unless_allowed(workspace, monkeypatch):
    from evolver_ui.command import ui_command

    class Obj:
        def config(self):
            return type("C", (), {"store": str(workspace[0])})()

    served = []
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: served.append(kw))
    r = CliRunner().invoke(ui_command, ["--host", "0.0.0.0"], obj=Obj())
    assert r.exit_code != 0 and "refusing to serve on 0.0.0.0" in str(r.exception) and not served
    r = CliRunner().invoke(ui_command, ["--host", "0.0.0.0", "--allow-remote", "--port", "9999"], obj=Obj())
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(ui_command, [], obj=Obj())
    assert r.exit_code == 0 and served == [{"host": "0.0.0.0", "port": 9999, "log_level": "warning"},
                                           {"host": "127.0.0.1", "port": 8765, "log_level": "warning"}]
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.com")


def test_on_loopback_only_loopback_names_are_answered(workspace):
    """A page of another site whose name resolves to 127.0.0.1 (DNS rebinding) gets nothing."""
    app = make_app(workspace[0], allowed_hosts=["127.0.0.1", "localhost"])
    with TestClient(app, base_url="http://127.0.0.1:8765") as ok, \
            TestClient(app, base_url="http://evil.example") as bad:
        assert ok.get("/").status_code == 200
        assert bad.get("/").status_code == 400


def test_the_ui_command_is_registered_by_the_plugin():
    import click

    import evolver_ui

    group = click.Group()
    evolver_ui.register_commands(cli=group)
    assert "ui" in group.commands
