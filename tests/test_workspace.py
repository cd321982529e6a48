"""One way to open a workspace and its run (evolver.workspace), and the commands that read programs and
skills out of it (`evolver programs ...`, `evolver skills history`). Fast: no model, no loop."""
from pathlib import Path

import pytest
from click.testing import CliRunner

from evolver import DB_FILE, EvolverError, ProgramRepo, Store, open_run, open_workspace, plugins
from evolver.cli import cli
from evolver.config import Config

TOY = Path(__file__).with_name("toybench.py")


def toy_config(tmp_path, **extra) -> Config:
    plugins.load_local(TOY)
    return Config(store=str(tmp_path / "ws"), benchmark="upper", benchmark_options={}, **extra)


def test_open_workspace_takes_a_config_or_a_folder(tmp_path):
    with pytest.raises(EvolverError, match="no store at"):
        open_workspace(tmp_path / "none", read_only=True)
    assert not (tmp_path / "none").exists()  # read-only creates nothing
    store, repo = open_workspace(tmp_path / "ws")
    with store:
        assert store.path == (tmp_path / "ws" / DB_FILE).resolve() and repo.root == (tmp_path / "ws").resolve()
    store, _ = open_workspace(Config(store=str(tmp_path / "ws")), read_only=True)
    store.close()


def test_open_run_records_the_run_ensures_the_seed_and_closes_everything(tmp_path):
    closed = []
    with open_run(toy_config(tmp_path), "eval-1") as run:
        assert (run.id, run.resumed) == ("eval-1", False)
        assert run.store.get_run("eval-1")["status"] == "running"
        assert run.store.get_program("seed", run_id="eval-1")["operator"] == "seed"
        assert run.repo.manifest("seed")["id"] == "seed"
        store, close = run.store, run.close
        run.close = lambda: (closed.append(run.id), close())
    assert closed == ["eval-1"]
    with pytest.raises(EvolverError, match="closed"):
        store.get_run("eval-1")
    with pytest.raises(RuntimeError):  # an error inside still releases the store
        with open_run(toy_config(tmp_path), "eval-2"):
            raise RuntimeError("boom")
    with Store(tmp_path / "ws" / DB_FILE) as again:
        assert [again.get_run(r)["status"] for r in ("eval-1", "eval-2")] == ["running", "running"]


def test_open_run_without_record_leaves_the_store_untouched(tmp_path):
    with open_run(toy_config(tmp_path), "init", record=False) as run:
        assert run.store.get_run("init") is None and not run.repo.exists


def test_open_run_resumes_the_newest_matching_run_with_its_recorded_config(tmp_path):
    with open_run(toy_config(tmp_path, loop={"iterations": 7}), "train-1") as run:
        run.store.update_run(run.id, status="failed")
    unfinished = {"status": ("running", "failed"), "prefix": "train-"}
    with open_run(toy_config(tmp_path), "train-2", resume=unfinished) as run:
        assert (run.id, run.resumed, run.config.loop.iterations) == ("train-1", True, 7)
        assert run.store.get_run("train-1")["status"] == "running" and run.store.get_run("train-2") is None
    with pytest.raises(EvolverError, match="nothing to pick up"):
        with open_run(toy_config(tmp_path), resume={"prefix": "nope-"}, nothing_to_resume="nothing to pick up"):
            pass
    Store(tmp_path / "ws" / DB_FILE).close()  # released after the error too


SKILL = "---\nname: alpha\ndescription: when alpha is needed\n{version}---\n\n{body}\n"


@pytest.fixture
def two_programs(tmp_path):
    """A seed with skill alpha 1.0; p1 edits alpha (1.1), p2 edits only the prompt, p3 deletes alpha."""
    seed = tmp_path / "seed"
    (seed / "skills" / "alpha").mkdir(parents=True)
    (seed / "skills" / "alpha" / "SKILL.md").write_text(
        SKILL.format(version="metadata:\n  version: '1.0'\n", body="Do alpha."))
    (seed / "skills" / "beta").mkdir(parents=True)
    (seed / "skills" / "beta" / "SKILL.md").write_text("---\nname: beta\ndescription: b\n---\nb\n")
    (seed / "prompt.md").write_text("You play.\n")
    repo = ProgramRepo(tmp_path / "ws")
    repo.init(seed, {"id": "seed"})

    def child(cid, parent, change, message):
        change(repo.new_candidate(cid, parent))
        repo.commit_candidate(cid, {"parent": parent, "operator": "edit"}, message)
    child("p1", "seed", lambda wt: (wt / "skills" / "alpha" / "SKILL.md").write_text(
        SKILL.format(version="version: 1.1\n", body="Do alpha, carefully.")), "sharpen alpha")
    child("p2", "p1", lambda wt: (wt / "prompt.md").write_text("You play well.\n"), "reword the prompt")
    child("p3", "p2", lambda wt: [p.unlink() for p in (wt / "skills" / "alpha").iterdir()], "drop alpha")
    return ["--store", str(tmp_path / "ws")]


def invoke(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_skills_history_lists_the_programs_that_changed_one_skill(two_programs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = invoke(two_programs + ["skills", "history", "alpha"])
    assert r.exit_code == 0, r.output
    rows = [line.split() for line in r.output.splitlines()[2:]]
    assert [(row[0], row[3], row[4]) for row in rows] == [("seed", "seed", "1.0"), ("p1", "edit", "1.1"),
                                                          ("p3", "edit", "deleted")]
    assert "sharpen alpha" in r.output and "reword" not in r.output
    r = CliRunner().invoke(cli, two_programs + ["skills", "history", "gamma"])
    assert r.exit_code == 2 and "no program has a skill 'gamma'" in r.output and "alpha, beta" in r.output


def test_programs_commands_and_the_old_skills_names(two_programs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    log = invoke(two_programs + ["programs", "log"])
    assert log.exit_code == 0 and [ln.split()[0] for ln in log.stdout.splitlines()[2:]] == ["seed", "p1", "p2", "p3"]
    assert "+Do alpha, carefully." in invoke(two_programs + ["programs", "diff", "seed", "p1"]).stdout
    assert "## skills/alpha/SKILL.md" in invoke(two_programs + ["programs", "show", "p1"]).stdout
    for sub, args in (("log", []), ("diff", ["seed", "p1"]), ("show", ["p1"])):
        old = invoke(two_programs + ["skills", sub, *args])
        assert old.exit_code == 0 and old.stdout == invoke(two_programs + ["programs", sub, *args]).stdout
        assert old.stderr.strip() == f"`evolver skills {sub}` is now `evolver programs {sub}`; use that (this alias will go)"
    help_text = invoke(["skills", "--help"]).output
    assert "history" in help_text and " log " not in help_text  # the aliases are hidden


def test_a_run_without_demonstrations_sees_none_of_the_benchmarks(tmp_path):
    from evolver import Task

    task = Task(id="t", benchmark="upper", split="train", category="c", gold=["say hi", "say bye"])
    with open_run(toy_config(tmp_path), "with-demos", record=False) as run:
        assert run.benchmark.demonstration(task) == ["say hi", "say bye"]
    with open_run(toy_config(tmp_path, demonstrations=False), "rewards-only", record=False) as run:
        assert run.benchmark.demonstration(task) is None
