"""Fault injection (issue 25): `kill -9` at random points of `evolver run` and `evolver serve`, then
`--resume` (a restart for serve); a full disk during a run; a damaged store and a damaged program
repository; and property-based fuzzing of what takes outside input (config, SKILL.md, serve's requests,
the seed harness's parse of a model's reply). Everything runs on the toy benchmark with scripted roles.

What must hold after a kill: no episode lost or stored twice, every evaluation a finished run needs,
``git fsck`` clean, no proposal left ``proposed``; after a full disk or a damaged file: a clear
``error: ...`` naming the file and what to do, never a traceback, and a store that opens again."""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evolver.cli import cli
from evolver.errors import ConfigError, EvolverError, SkillError
from evolver.store import Store

TOY = str(Path(__file__).with_name("toybench.py"))
ROLES = [f"--set=roles.{r}.backend=toyrule" for r in ("executor", "proposer", "builder", "judge")]
EVOLVER = [sys.executable, "-m", "evolver.cli"]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])


def run_args(ws: Path) -> list[str]:
    """A small loop run on the toy benchmark: 3 iterations of 2 candidates, every role scripted."""
    return ["--plugin", TOY, "--store", str(ws), "--set=benchmark=upper", "--set=benchmark_options={}",
            "--set=proposers=[\"evoskill\"]", *ROLES, "--set=roles.executor.options={delay = 0.02}",
            "--set=loop.train_per_category=2", "--set=loop.candidates_per_iteration=2", "--set=loop.patience=9"]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no evolver.toml of the developer's is read


def spawn(args: list[str], marks: Path, **kw) -> subprocess.Popen:
    env = dict(os.environ, TOY_MARK_DIR=str(marks), PYTHONUNBUFFERED="1")
    return subprocess.Popen(EVOLVER + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


def wait_for(condition, proc: subprocess.Popen | None = None, timeout: float = 60.0) -> bool:
    """Poll ``condition`` until it holds (True) or ``proc`` ended or time ran out (False)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.01)
    return False


def kill_9(proc: subprocess.Popen, group: bool = False) -> None:
    """SIGKILL: the process alone (its git children finish what they were writing), or its whole process
    group (git killed mid-write too, as by a power cut)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL) if group else os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate(timeout=30)


def git_fsck(repo: Path) -> None:
    done = subprocess.run(["git", "-C", str(repo), "fsck", "--no-progress"], capture_output=True, text=True)
    assert done.returncode == 0, f"git fsck {repo}: {done.stdout}{done.stderr}"


def check_run_invariants(ws: Path, played: set[str]) -> dict:
    """The loop run in ``ws`` finished whole: nothing doubled, nothing lost, nothing left half-done."""
    from evolver.run import LOOP_RUN_ID

    with Store(ws / "evolver.duckdb", read_only=True) as store:
        run = store.latest_run(pattern=LOOP_RUN_ID)
        assert run is not None and run["status"] == "finished", run
        rid = run["run_id"]
        _, doubled = store.query("SELECT program_id, task_id, seed, purpose, split, count(*) FROM episodes "
                                 "WHERE run_id = ? GROUP BY ALL HAVING count(*) > 1", [rid])
        assert doubled == [], f"episodes stored twice: {doubled}"
        _, doubled = store.query("SELECT cache_key, purpose, count(*) FROM episodes WHERE run_id = ? "
                                 "GROUP BY ALL HAVING count(*) > 1", [rid])
        assert doubled == []
        stored = {r[0] for r in store.query("SELECT episode_id FROM episodes WHERE run_id = ?", [rid])[1]}
        assert played <= stored, f"played but not stored: {sorted(played - stored)}"  # lost nothing
        its = store.iterations(rid)
        assert [i["iteration"] for i in its] == [0, 1, 2] and {i["status"] for i in its} == {"finished"}
        proposals = store.proposals(rid)
        assert proposals and "proposed" not in {p["status"] for p in proposals}, proposals
        # Every evaluation a finished run needs: the seed and each admitted program on all 4 dev tasks,
        # the reported programs on all 4 test tasks, and the best one is the toy's right answer.
        summary = run["summary"]
        needed = {"seed"} | {p["proposal_id"] for p in proposals if p["status"] == "admitted"}
        for program in needed:
            _, rows = store.query("SELECT count(DISTINCT task_id) FROM episodes WHERE run_id = ? AND program_id = ? "
                                  "AND purpose = 'eval' AND split = 'dev'", [rid, program])
            assert rows[0][0] == 4, (program, rows)
        for program in summary["test"]:
            _, rows = store.query("SELECT count(DISTINCT task_id) FROM episodes WHERE run_id = ? AND program_id = ? "
                                  "AND split = 'test'", [rid, program])
            assert rows[0][0] == 4, (program, rows)
        assert summary["test"][summary["best"]]["score"] == 1.0
    git_fsck(ws / "programs")
    return run


def killed_then_resumed(tmp_path: Path, seed: int, kills: int, extra: list[str] = ()) -> None:
    rng = random.Random(seed)
    ws, marks = tmp_path / "ws", tmp_path / "marks"
    marks.mkdir()
    finished = False
    for k in range(kills):
        before = len(list(marks.iterdir()))
        proc = spawn(run_args(ws) + ["run", *extra] + (["--resume"] if k else ["--iterations", "3"]), marks,
                     start_new_session=True)
        # From the first episode this process plays, a random delay: anywhere in proposing, building,
        # checking, evaluating, admitting or recording (a run takes a few seconds).
        started = wait_for(lambda: len(list(marks.iterdir())) > before, proc)
        time.sleep(rng.uniform(0.0, 2.5))
        if not started or proc.poll() is not None:  # it finished (or failed) before the kill
            out = proc.communicate(timeout=30)[0].decode()
            assert proc.returncode == 0, out[-3000:]
            finished = True
            break
        kill_9(proc, group=rng.random() < 0.5)
    if not finished:
        r = CliRunner().invoke(cli, run_args(ws) + ["run", *extra, "--resume"], env={"TOY_MARK_DIR": str(marks)},
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output
    check_run_invariants(ws, {p.name.rsplit("-", 1)[1] for p in marks.iterdir()})


def test_run_killed_at_random_points_then_resumed_loses_and_doubles_nothing(tmp_path):
    killed_then_resumed(tmp_path, seed=0, kills=2)


def test_a_driver_killed_on_a_ray_cluster_resumes_and_loses_and_doubles_nothing(tmp_path):
    """The driver alone writes the store, so a driver killed while Ray workers play resumes as in-process
    runs do; the cluster it started goes with it (Ray's own reaper), and the resumed run starts another."""
    pytest.importorskip("ray")
    killed_then_resumed(tmp_path, seed=3, kills=1, extra=["--cluster", "ray", "--set=cluster.workers=2",
                                                          "--set=cluster.cpus_per_worker=0.5",
                                                          "--set=cluster.options={num_cpus = 2}"])


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 7))
def test_run_killed_many_times_at_random_points(tmp_path, seed):
    killed_then_resumed(tmp_path, seed=seed, kills=4)


# --- evolver serve --------------------------------------------------------------------------------------------

def start_serve(ws: Path, tmp_path: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "EVOLVER_PLUGINS": "autoskill", "PYTHONUNBUFFERED": "1"}
    cmd = EVOLVER + ["--plugin", TOY, "--store", str(ws), "serve", "--backend", "toyrule", "--port", "0",
                     "--set", 'plugins.autoskill.embedder="hashing"']
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    startup = []  # the start-up's stage lines come first
    while "listening on http://127.0.0.1:" not in (line := proc.stdout.readline()):
        startup.append(line)
        if not line:
            proc.kill()
            raise AssertionError("".join(startup) + proc.stdout.read())
    return proc, line.split("listening on ")[1].split()[0]


TEACH = [{"role": "user", "content": "Answer with the word: apple"}, {"role": "assistant", "content": "apple"},
         {"role": "user", "content": "Always answer in UPPERCASE letters."}]


def serve_killed_then_restarted(tmp_path: Path, seed: int) -> None:
    """A conversation the server acknowledged (its feedback found it) survives a kill -9 at a random
    point of the background learning (a skill extracted, committed to the scope's git bank), once."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("evolver_autoskill")
    rng = random.Random(seed)
    ws = tmp_path / "ws"
    proc, url = start_serve(ws, tmp_path)
    try:
        r = httpx.post(url + "/chat/completions", json={"model": "toyrule", "user": "ana", "messages": TEACH},
                       timeout=30)
        assert r.status_code == 200, r.text
        conv = r.json()["id"]
        # The conversation is logged after the response went out: durable once feedback finds it.
        assert wait_for(lambda: httpx.post(url + "/autoskill/feedback", json={"conversation_id": conv, "score": 1},
                                           timeout=30).status_code == 200, proc, timeout=30)
        time.sleep(rng.uniform(0.0, 0.4))
    finally:
        kill_9(proc, group=rng.random() < 0.5)
    proc, url = start_serve(ws, tmp_path)  # the store and the banks open again after the kill
    try:
        r = httpx.post(url + "/chat/completions", json={"model": "toyrule", "user": "ana", "messages": TEACH[:1]},
                       timeout=30)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"].lower() == "apple", r.text
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0 and "Traceback" not in out, out
    with Store(ws / "evolver.duckdb", read_only=True) as store:
        _, rows = store.query("SELECT conversation_id, feedback FROM autoskill_conversations WHERE scope = 'ana'")
    ids = [cid for cid, _ in rows]
    assert len(ids) == len(set(ids)) == 2  # the acknowledged one and the new one, once each
    assert (conv.removeprefix("chatcmpl-"), 1.0) in rows
    for bank in (ws / "autoskill").iterdir():
        git_fsck(bank)


def test_serve_killed_during_background_learning_then_restarted(tmp_path):
    serve_killed_then_restarted(tmp_path, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 5))
def test_serve_killed_at_more_random_points(tmp_path, seed):
    serve_killed_then_restarted(tmp_path, seed=seed)


# --- evolver train --------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_train_killed_then_resumed_records_each_step_once(tmp_path):
    """GRPO on the tiny random Llama (tests/tinymodel.py): kill -9 after the first checkpoint, then resume."""
    pytest.importorskip("evolver_grpo")
    pytest.importorskip("torch")
    from tinymodel import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny", max_positions=2048)
    letters = Path(__file__).resolve().parents[1] / "plugins" / "grpo" / "tests" / "letterbench.py"
    ws = tmp_path / "ws"
    roles = ("executor", "proposer", "builder", "judge")
    args = ["--plugin", str(letters), "--store", str(ws), "--set=benchmark=letters", "--set=benchmark_options={}",
            *[f"--set=roles.{r}.backend=transformers" for r in roles],
            *[f"--set=roles.{r}.model={tiny}" for r in roles],
            "train", "--steps", "6", "--set=plugins.grpo.max_new_tokens=4", "--set=plugins.grpo.group_size=2",
            "--set=plugins.grpo.tasks_per_step=2", "--set=plugins.grpo.save_every=1",
            "--set=plugins.grpo.eval_per_category=1"]
    env = dict(os.environ, EVOLVER_PLUGINS="transformers,grpo", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(EVOLVER + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines = []
    for line in proc.stdout:  # progress lines: kill once step 2 is reported (a checkpoint was saved)
        lines.append(line)
        if line.lstrip().startswith("step") and line.split()[1:2] == ["2"]:
            time.sleep(random.Random(0).uniform(0, 0.5))
            break
    kill_9(proc, group=True)
    assert any(ln.split()[1:2] == ["2"] for ln in lines if ln.lstrip().startswith("step")), "".join(lines)[-3000:]
    done = subprocess.run(EVOLVER + args + ["--resume"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with Store(ws / "evolver.duckdb", read_only=True) as store:
        run = store.latest_run(prefix="train-")
        assert run["status"] == "finished"
        steps = [r[0] for r in store.query("SELECT step FROM train_steps WHERE run_id = ? ORDER BY step",
                                           [run["run_id"]])[1]]
    assert steps == list(range(1, 7))  # each step recorded once, none lost
    git_fsck(ws / "programs")


# --- a full disk ----------------------------------------------------------------------------------------------

def small_disk(path: Path, megabytes: int):
    """A tmpfs of ``megabytes`` at ``path`` (root in a container), else None."""
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(path)],
                          capture_output=True, text=True)
    return path if done.returncode == 0 else None


def fill(folder: Path) -> None:
    with open(folder / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        except OSError:
            pass


def test_a_full_disk_stops_the_run_with_a_clear_error_and_the_store_opens_after(tmp_path):
    mnt = small_disk(tmp_path / "disk", 16)
    if mnt is None:
        pytest.skip("no small disk to fill: mounting a tmpfs needs root (CAP_SYS_ADMIN); the RLIMIT_FSIZE "
                    "variant below covers the same path")
    try:
        ws, marks = mnt / "ws", tmp_path / "marks"
        marks.mkdir()
        proc = spawn(run_args(ws) + ["run", "--iterations", "3"], marks)
        assert wait_for(lambda: len(list(marks.iterdir())) >= 6, proc)  # the seed's dev episodes, rollouts
        fill(mnt)  # the disk fills while the run is writing
        out = proc.communicate(timeout=120)[0].decode()
        assert proc.returncode == 2, out[-3000:]
        assert "Traceback" not in out and "error: " in out, out[-3000:]
        assert "disk is full" in out and ("No space left on device" in out or "Out of diskspace" in out), out[-3000:]
        (mnt / "filler").unlink()
        with Store(ws / "evolver.duckdb") as store:  # opens, and the run is there to resume
            assert store.latest_run()["status"] in ("running", "failed")
        r = CliRunner().invoke(cli, run_args(ws) + ["run", "--resume"], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        check_run_invariants(ws, set())
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_file_size_limit_stops_the_run_with_a_clear_error(tmp_path):
    """The quota variant that needs no root: RLIMIT_FSIZE, so a write past it fails with EFBIG."""
    import resource

    ws, marks = tmp_path / "ws", tmp_path / "marks"
    marks.mkdir()
    assert CliRunner().invoke(cli, run_args(ws) + ["init"]).exit_code == 0
    limit = 16 * 1024  # the store's write-ahead log soon outgrows it; git objects and skill files do not

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    proc = spawn(run_args(ws) + ["run", "--iterations", "3"], marks, preexec_fn=limited)
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 2, out[-3000:]
    assert "Traceback" not in out and "error: " in out and ("File too large" in out or "disk is full" in out), \
        out[-3000:]
    with Store(ws / "evolver.duckdb") as store:
        assert store.latest_run() is not None


# --- damaged files --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """A workspace after one `evolver eval` (a store with episodes, a program repository)."""
    ws = tmp_path_factory.mktemp("evaluated") / "ws"
    args = ["--plugin", TOY, "--store", str(ws), "--set=benchmark=upper", "--set=benchmark_options={}",
            "--set=proposers=[\"evoskill\"]", *ROLES]
    from evolver import plugins
    plugins.reset()
    r = CliRunner().invoke(cli, args + ["eval", "--split", "dev"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    plugins.reset()
    return ws, args


def copy_of(evaluated, tmp_path) -> tuple[Path, list[str]]:
    ws, args = evaluated
    shutil.copytree(ws, tmp_path / "ws", symlinks=True)
    return tmp_path / "ws", [a.replace(str(ws), str(tmp_path / "ws")) for a in args]


def assert_clean_error(r, *words):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.exception is None or isinstance(r.exception, SystemExit), r.output
    assert "\nerror: " in "\n" + r.output and all(w in r.output for w in words), r.output


@pytest.mark.parametrize("damage", ["garbage", "truncated", "block", "header"])
def test_a_damaged_store_is_a_clear_error_naming_the_file(evaluated, tmp_path, damage):
    ws, args = copy_of(evaluated, tmp_path)
    db = ws / "evolver.duckdb"
    data = bytearray(db.read_bytes())
    if damage == "garbage":
        data = bytearray(random.Random(0).randbytes(4096))
    elif damage == "truncated":
        data = data[:100]
    elif damage == "block":  # the first data block: its checksum no longer matches
        data[5000:25000] = b"\xff" * 20000
    else:  # both database headers
        data[4096:12288] = b"\x00" * 8192
    db.write_bytes(bytes(data))
    for command in (["eval", "--split", "dev"], ["traces"], ["run", "--iterations", "1"]):
        r = CliRunner().invoke(cli, args + command)
        assert_clean_error(r, str(db), "damaged", "backup")


def test_random_damage_to_the_store_is_never_a_traceback(evaluated, tmp_path):
    ws, _ = evaluated
    size = (ws / "evolver.duckdb").stat().st_size
    rng = random.Random(0)
    for k in range(12):
        db = tmp_path / f"s{k}.duckdb"
        shutil.copy(ws / "evolver.duckdb", db)
        with open(db, "r+b") as f:
            f.seek(rng.randrange(0, size - 4096))
            f.write(rng.randbytes(4096))
        try:
            with Store(db) as store:
                run = store.latest_run()
                store.episodes(run_id=run["run_id"])
                store.query("SELECT count(*), sum(score) FROM episodes")
        except EvolverError as exc:
            assert str(db) in str(exc) and "damaged" in str(exc)


def damage_object(repo: Path, rev: str) -> Path:
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", rev], capture_output=True, text=True,
                         check=True).stdout.strip()
    obj = repo / ".git" / "objects" / sha[:2] / sha[2:]
    obj.chmod(0o644)
    obj.write_bytes(b"garbage")
    return obj


def test_a_damaged_seed_commit_is_a_clear_error_and_never_replaced_silently(evaluated, tmp_path):
    ws, args = copy_of(evaluated, tmp_path)
    obj = damage_object(ws / "programs", "main")
    for command in (["eval", "--split", "dev"], ["run", "--iterations", "1"], ["programs", "log"]):
        r = CliRunner().invoke(cli, args + command)
        assert_clean_error(r, str(obj), "damaged", "fsck")
    assert not list(ws.glob("programs.incomplete-*"))  # the repository was not set aside and rebuilt


def test_a_damaged_skill_file_object_is_a_clear_error_naming_it(evaluated, tmp_path):
    ws, args = copy_of(evaluated, tmp_path)
    obj = damage_object(ws / "programs", "main:prompt.md")
    r = CliRunner().invoke(cli, args + ["programs", "show", "seed"])
    assert_clean_error(r, str(obj), "damaged", "fsck")


# --- property-based fuzzing ----------------------------------------------------------------------------------

KEYS = ["benchmark", "store", "harness", "proposers", "seed_skills", "trainer", "roles", "loop", "plugins",
        "loop.iterations", "loop.gate", "loop.gate_level", "loop.objectives", "loop.monitor", "loop.max_wall_s",
        "loop.dev_episodes_per_task", "loop.score_margin", "roles.executor", "roles.executor.backend",
        "roles.executor.options", "roles.executor.temperature", "roles.nobody.model", "plugins.evoskill.mode",
        "benchmark_options", "benchmark_options.suite", "loop.iterations.x", "", ".", "a..b", "loop."]
toml_values = st.one_of(
    st.integers(-10**30, 10**30).map(str), st.floats(allow_nan=True).map(repr), st.sampled_from(
        ["true", "false", "nan", "inf", "-inf", "[]", "{}", "[1, 'a']", "{a = 1}", "{iterations = 2}", '"x"',
        "'''", '"""', "[", "{", "1979-05-27", "07:32:00", "0x1f", "1_000", "= 3", "a = 1\nb = 2", "\x00"]),
    st.text(max_size=30))
overrides = st.builds(lambda k, v: f"{k}={v}", st.one_of(st.sampled_from(KEYS), st.text(max_size=20)), toml_values) | \
    st.text(max_size=40)
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                      st.text(max_size=20))
json_like = st.recursive(json_leaf, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c,
                                                                                          max_size=4), max_leaves=12)
config_dicts = st.dictionaries(st.sampled_from([k for k in KEYS if k and "." not in k]) | st.text(max_size=10),
                               json_like | st.dictionaries(st.sampled_from(
                                   ["iterations", "gate", "gate_level", "executor", "backend", "objectives",
                                    "score_margin", "options", "mode"]) | st.text(max_size=8), json_like,
                                   max_size=4), max_size=5)


@FUZZ
@given(st.lists(overrides, max_size=4))
def test_fuzz_config_overrides_give_a_config_or_a_config_error(items):
    from evolver.config import Config, load_config

    try:
        assert isinstance(load_config(None, items), Config)
    except ConfigError as exc:
        assert str(exc)


@FUZZ
@given(config_dicts, st.lists(overrides, max_size=2))
def test_fuzz_config_dicts_give_a_config_or_a_config_error(data, items):
    from evolver.config import Config, load_config

    try:
        assert isinstance(load_config(None, items, base=data), Config)
    except ConfigError as exc:
        assert str(exc)


@FUZZ
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_fuzz_config_files_give_a_config_or_a_config_error(tmp_path_factory, text):
    from evolver.config import Config, load_config

    path = tmp_path_factory.mktemp("cfg") / "evolver.toml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        assert isinstance(load_config(path), Config)
    except ConfigError as exc:
        assert str(path) in str(exc) or "config key" in str(exc)


FRONT = st.sampled_from(["---\n", "---\r\n", "\ufeff---\n", "--- \n", "", "---"])
front_lines = st.lists(st.one_of(
    st.sampled_from(["name: my-skill", "name: My Skill", "name: 12", "name:", "name: [a, b]", "name: {a: 1}",
                     "description: Use when asked.", "description:", "description: 'unterminated",
                     "description: a: b", "metadata: {observe: x}", "- a list", "key: &a [*a]", "? complex",
                     "name: my-skill\nname: other", "\tname: tab", ": nothing", "!!python/object:os.system x"]),
    st.text(max_size=40)), max_size=6).map("\n".join)


@FUZZ
@given(FRONT, front_lines, st.sampled_from(["\n---\n", "\n---", "\n", "\n--- \n", ""]), st.text(max_size=80),
       st.binary(max_size=8))
def test_fuzz_skill_md_gives_a_skill_or_a_skill_error_with_file_and_line(tmp_path_factory, start, front, end, body,
                                                                          raw):
    from evolver.skills import parse_skill

    folder = tmp_path_factory.mktemp("skills") / "my-skill"
    folder.mkdir()
    (folder / "SKILL.md").write_bytes((start + front + end + body).encode("utf-8", "surrogatepass") + raw)
    try:
        skill = parse_skill(folder)
    except SkillError as exc:
        assert exc.path.endswith(("SKILL.md", "my-skill")) and exc.message
        assert exc.line is None or exc.line >= 1
        assert str(exc).startswith(exc.path)
    else:
        assert skill.name == "my-skill" and skill.description


chat_bodies = st.one_of(json_like, st.fixed_dictionaries(
    {"messages": st.one_of(json_like, st.lists(st.one_of(json_like, st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "developer", "tool", "bot"]) | json_leaf,
         "content": st.one_of(json_leaf, st.lists(st.one_of(json_like, st.fixed_dictionaries(
             {"type": st.sampled_from(["text", "image_url"]), "text": json_leaf}))))})), max_size=4))},
    optional={k: json_like for k in ("model", "n", "stream", "stream_options", "max_tokens", "max_completion_tokens",
                                     "temperature", "stop", "seed", "user")}))


@FUZZ
@given(chat_bodies)
def test_fuzz_serve_request_bodies_give_a_request_or_a_4xx(body):
    request = pytest.importorskip("evolver_autoskill.request")
    import json

    limits = request.Limits(max_body_bytes=1 << 20, max_json_depth=32, max_request_tokens=512, max_temperature=2.0,
                            max_messages=64, max_chars=10_000)
    try:
        raw = json.dumps(body).encode()
    except ValueError:  # nan and inf are not JSON: send them as Python writes them
        raw = json.dumps(body, allow_nan=True).encode()
    for parse in (lambda: request.parse_request(request.load_json(raw, limits), limits),
                  lambda: request.parse_request(body, limits), lambda: request.parse_feedback(body)):
        try:
            parsed = parse()
        except request.Reject as exc:
            assert 400 <= exc.status < 500 and exc.message
        else:
            assert parsed is not None


@FUZZ
@given(st.binary(max_size=300) | st.text(max_size=100).map(str.encode))
def test_fuzz_serve_raw_bodies_give_json_or_a_4xx(raw):
    request = pytest.importorskip("evolver_autoskill.request")
    limits = request.Limits(max_body_bytes=1 << 20, max_json_depth=8, max_request_tokens=512, max_temperature=2.0,
                            max_messages=64, max_chars=10_000)
    try:
        request.parse_request(request.load_json(raw, limits), limits)
    except request.Reject as exc:
        assert 400 <= exc.status < 500


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    from evolver.harness import SEED_DIR, make_harness, program_context
    from evolver.types import Program

    root = tmp_path_factory.mktemp("seed") / "seed"
    shutil.copytree(SEED_DIR, root)
    return make_harness(program_context(Program("seed", "c0ffee", str(root), "hseed")))


@FUZZ
@given(st.text(max_size=200), st.lists(st.text(max_size=30), max_size=5), st.integers(-5, 10),
       st.dictionaries(st.sampled_from(["look", "inventory", "x"]), json_like, max_size=2))
def test_fuzz_the_seed_harness_parses_any_reply_into_an_action(harness, text, actions, index, info):
    from evolver.backends.base import Backend
    from evolver.harness import Action
    from evolver.types import ChoiceRequest, ChoiceResult, GenRequest, GenResult, Message, Observation, Task

    task = Task("t", "b", "train", "c", prompt="Do the thing.")
    obs = Observation("You are here.", actions=actions or None, info=info)
    state = harness.start(task, obs)
    request = harness.next_call(state, obs)
    answers = [GenResult(text=text)]
    if isinstance(request, ChoiceRequest):  # what a backend that writes its choice answers, and any index
        answers = Backend.match_written([request], [GenResult(text=text)]) + [ChoiceResult(index, [])]
    for answer in answers:
        action = harness.parse(state, obs, request, answer)
        assert isinstance(action, Action)
        if isinstance(request, ChoiceRequest) and action.env_action:
            assert action.env_action in request.options
        harness.observe(state, action, text)
        nxt = harness.next_call(state, obs)
        assert isinstance(nxt, (ChoiceRequest, GenRequest)) and all(isinstance(m, Message) for m in nxt.messages)
    if not isinstance(request, ChoiceRequest):
        free = harness.parse(state, obs, GenRequest(messages=[Message("user", "x")]), GenResult(text=text))
        assert isinstance(free, Action)


@FUZZ
@given(st.sampled_from(["chat", "tool-calling"]), st.text(max_size=300) | st.builds(
    lambda name, args: json.dumps({"name": name, "arguments": args}), st.text(max_size=10), json_like),
    st.lists(st.dictionaries(st.sampled_from(["name", "arguments"]), json_like, max_size=2), max_size=2))
def test_fuzz_the_chat_presets_parse_any_reply_or_tool_call_into_an_action(harness, preset, text, calls):
    from evolver.harness import Action
    from evolver.types import GenRequest, GenResult, Message, Observation, Task

    tools = [{"type": "function", "function": {"name": "look", "parameters": {"properties": {"q": {}}}}}]
    task = Task("t", "b", "train", "c", prompt="Help.", hints={"preset": preset}, tools=tools)
    obs = Observation("Customer: hi")
    state = harness.start(task, obs)
    request = harness.next_call(state, obs)
    assert isinstance(request, GenRequest) and (request.tools == tools) == (preset == "tool-calling")
    action = harness.parse(state, obs, request, GenResult(text=text, tool_calls=calls or None))
    assert isinstance(action, Action) and (action.tool or isinstance(action.env_action, str))
    if action.env_action and action.env_action.startswith('{"arguments"'):
        assert set(json.loads(action.env_action)) == {"name", "arguments"}
    harness.observe(state, action, text)
    nxt = harness.next_call(state, obs)
    assert all(isinstance(m, Message) for m in nxt.messages) and nxt.messages[-1].role == "user"
