"""The CLI end to end on the toy benchmark with scripted roles, including kill -9 and --resume."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from evolver.cli import cli

TOY = str(Path(__file__).with_name("toybench.py"))
ROLES = [f"--set=roles.{r}.backend=toyrule" for r in ("executor", "proposer", "builder", "judge")]


def base_args(tmp_path):
    return ["--plugin", TOY, "--store", str(tmp_path / "store"),
            "--set=benchmark=upper", "--set=benchmark_options={}", "--set=proposers=[\"evoskill\"]", *ROLES]


def invoke(args):
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    return result


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # evolver.toml is read from (and `init` writes it to) the working folder


def test_init_eval_run_and_inspect(tmp_path):
    args = base_args(tmp_path)
    r = invoke(args + ["init"])
    assert r.exit_code == 0 and (tmp_path / "evolver.toml").exists()
    assert (tmp_path / "store" / "programs" / ".git").exists()
    r = invoke(args + ["eval", "--split", "dev"])
    assert r.exit_code == 0, r.output
    assert [ln.split() for ln in r.output.splitlines() if ln.startswith("all")] == [["all", "0.000"]]
    assert "traces: evolver traces --run eval-" in r.output
    episode = r.output.split("--episode ")[1].split(")")[0]
    r = invoke(args + ["traces", "--episode", episode])
    assert r.exit_code == 0 and "Answer with the word" in r.output and "score   0.000" in r.output
    r = invoke(args + ["run", "--iterations", "1", "--set=loop.candidates_per_iteration=1",
                       "--set=loop.best_of_n=true"])
    assert r.exit_code == 0, r.output
    assert "baseline (seed) test score 0.000" in r.output and "test score 0.000; best (p0001) 1.000" in r.output
    assert "Best vs seed on test: +1.000, 95% bootstrap interval [1.000, 1.000] on 4 tasks (paired)." in r.output
    assert "Best-of-1 vs seed on test: +0.000" in r.output  # the scripted executor ignores sampling
    r = invoke(args + ["frontier"])
    assert r.exit_code == 0 and "p0001" in r.output
    r = invoke(args + ["programs", "log"])
    assert "p0001" in r.output and "seed" in r.output and "frontier/p0001" in r.output
    r = invoke(args + ["programs", "diff", "seed", "p0001"])
    assert "+name: shout-words" in r.output
    r = invoke(args + ["programs", "show", "best"])
    assert "UPPERCASE" in r.output
    r = invoke(args + ["report"])
    assert "Best vs seed on test: +1.000, 95% bootstrap interval" in r.output and "| seed, best of 1 " in r.output
    r = invoke(args + ["traces", "SELECT count(*) AS n FROM episodes WHERE purpose = 'eval' AND split = 'test'"])
    assert r.exit_code == 0 and r.output.strip().splitlines()[-1].strip() == "8"
    graph = subprocess.run(["git", "-C", str(tmp_path / "store" / "programs"), "log", "--all", "--oneline", "--decorate"],
                           capture_output=True, text=True).stdout
    assert "frontier/p0001" in graph and "cand/p0001" in graph


@pytest.mark.parametrize("extra, message", [
    (["--set=loop.iteratons=1", "eval"], "did you mean 'loop.iterations'"),
    (["--set=benchmark=nope", "eval"], "unknown benchmark 'nope'; known benchmarks: basic, twx, upper"),
    (["--set=roles.executor.backend=gpt", "eval"], "unknown backend 'gpt'"),
    (["traces", "SELECT id FROM episodes"], 'column "id" not found'),  # the user's SQL: where to look
])
def test_bad_input_is_a_clean_error(tmp_path, extra, message):
    if extra[0] == "traces":  # traces reads an existing store, and never creates one
        from evolver.store import Store
        Store(tmp_path / "store" / "evolver.duckdb").close()
    r = CliRunner().invoke(cli, base_args(tmp_path) + extra)
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output
    if extra[0] == "traces":
        assert "tables: " in r.output and "episodes, " in r.output and 'DESCRIBE episodes' in r.output


def test_second_process_on_the_same_store_gets_a_clear_message(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from evolver.store import Store; "
                               f"s = Store({str(store / 'evolver.duckdb')!r}); print('ready', flush=True); time.sleep(30)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        r = CliRunner().invoke(cli, base_args(tmp_path) + ["traces"])
        assert r.exit_code == 2 and "in use by another process" in r.output and str(holder.pid) in r.output
    finally:
        holder.kill()
        holder.wait()


def run_then_kill(tmp_path, candidates: int, iterations: int, killed_when) -> tuple[Path, subprocess.Popen]:
    """Start `evolver run` in a child process on the toy benchmark; SIGKILL it once ``killed_when(marks)``."""
    marks = tmp_path / "marks"
    marks.mkdir()
    args = base_args(tmp_path) + ["--set=roles.executor.options={delay = 0.05}", "--set=loop.train_per_category=2",
                                  f"--set=loop.candidates_per_iteration={candidates}", "--set=loop.patience=9"]
    env = dict(os.environ, TOY_MARK_DIR=str(marks))
    proc = subprocess.Popen([sys.executable, "-m", "evolver.cli", *args, "run", "--iterations", str(iterations)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline and not killed_when(marks) and proc.poll() is None:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return marks, proc


def test_kill_9_then_resume_loses_nothing_and_counts_nothing_twice(tmp_path):
    # 4 dev episodes of the seed, 4 training rollouts, then candidates: kill while they are being checked.
    marks, proc = run_then_kill(tmp_path, 2, 3, lambda marks: len(list(marks.iterdir())) >= 9)
    assert len(list(marks.glob("train-*"))) == 4, proc.stdout.read().decode()[-2000:]
    from evolver.run import LOOP_RUN_ID
    from evolver.store import Store
    with Store(tmp_path / "store" / "evolver.duckdb") as store:  # newer killed training/eval runs
        store.create_run("train-20990101-000000", "toy", {})
        store.create_run("eval-20990101-000001", "toy", {})
    r = CliRunner().invoke(cli, base_args(tmp_path) + ["run", "--resume"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    with Store(tmp_path / "store" / "evolver.duckdb") as store:
        assert store.latest_run()["run_id"] == "eval-20990101-000001"
        assert store.get_run("train-20990101-000000")["status"] == "running"  # not the one resumed
        run = store.latest_run(pattern=LOOP_RUN_ID)
        assert run["status"] == "finished"
        cols, rows = store.query("SELECT cache_key, purpose, count(*) FROM episodes WHERE run_id = ? "
                                 "GROUP BY 1, 2 HAVING count(*) > 1", [run["run_id"]])
        assert rows == []  # no episode stored twice
        played = {p.name.rsplit("-", 1)[1] for p in marks.iterdir()}
        stored = {e.id for e in store.episodes(run_id=run["run_id"])}
        assert played <= stored  # every episode played before the kill is in the store
        its = store.iterations(run["run_id"])
        assert [i["iteration"] for i in its if i["status"] == "finished"] == [0, 1, 2]
        assert run["summary"]["test"][run["summary"]["best"]]["score"] == 1.0
        assert "proposed" not in {p["status"] for p in store.proposals(run["run_id"])}


def test_eval_compares_skill_conditions_with_normalised_gain(tmp_path):
    args = base_args(tmp_path)
    assert invoke(args + ["run", "--iterations", "1", "--set=loop.candidates_per_iteration=1"]).exit_code == 0
    r = invoke(args + ["eval", "--split", "test", "--skills", "none,evolved,self"])
    assert r.exit_code == 0, r.output
    # Progress without a terminal: plain lines, one count over the three conditions' episodes, the last always.
    progress = [ln for ln in r.output.splitlines() if ln.startswith("eval: ")]
    assert progress and all("/12 episodes" in ln for ln in progress), r.output
    assert progress[-1].startswith("eval: 12/12 episodes  ") and progress[-1].endswith("]"), progress
    rows = {ln.split()[0]: ln.split() for ln in r.output.splitlines() if ln.split()[:1] in (["none"], ["evolved"], ["self"])}
    assert rows["none"][1] == "0.000" and rows["evolved"][1] == "1.000"
    assert rows["evolved"][3] == "+1.000" and rows["evolved"][4] == "+1.000"  # absolute and normalised gain
    # Asked for "numbered steps", the scripted model writes its UPPERCASE rule for itself too.
    assert rows["self"][1] == "1.000" and rows["self"][4] == "+1.000"
    r = invoke(args + ["eval", "--skills", "some"])
    assert r.exit_code == 2 and "choose from none, evolved, self" in r.output


def test_kill_9_after_an_admission_resumes_from_the_same_frontier(tmp_path):
    # Rollouts of p0001 start only after iteration 0 admitted it and finished: kill during iteration 1.
    marks, proc = run_then_kill(tmp_path, 1, 4, lambda marks: bool(list(marks.glob("train-p0001-*"))))
    assert list(marks.glob("train-p0001-*")), proc.stdout.read().decode()[-2000:]
    r = CliRunner().invoke(cli, base_args(tmp_path) + ["run", "--resume"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    from evolver.store import Store
    with Store(tmp_path / "store" / "evolver.duckdb") as store:
        run = store.latest_run()
        its = store.iterations(run["run_id"])
        assert its[0]["summary"]["admitted"] == ["p0001"]  # iteration 0 was not redone
        assert all("p0001" in i["frontier"] for i in its if i["status"] == "finished")
        assert [p["proposal_id"] for p in store.proposals(run["run_id"]) if p["iteration"] == 0] == ["p0001"]
        assert run["summary"]["best"] == "p0001" and len(its) == 4


def test_a_killed_run_has_a_partial_report_and_report_and_frontier_show_the_run_the_user_started(tmp_path):
    marks, proc = run_then_kill(tmp_path, 1, 4, lambda marks: bool(list(marks.glob("train-p0001-*"))))
    assert list(marks.glob("train-p0001-*")), proc.stdout.read().decode()[-2000:]
    from evolver.store import Store
    with Store(tmp_path / "store" / "evolver.duckdb") as store:
        started = store.latest_run()["run_id"]
        store.create_run(f"{started}-imitation-it1", "upper", {})  # a proposer's training sub-run, newer
    r = invoke(base_args(tmp_path) + ["report"])
    assert r.exit_code == 0 and f"# evolver run {started} (partial)" in r.output, r.output
    assert "no final test was played" in r.output and "| p0001 | 1.000 |" in r.output  # its dev score so far
    assert "| p0001 | evoskill | create | admitted |" in r.output
    r = invoke(base_args(tmp_path) + ["frontier"])
    assert r.exit_code == 0 and f"run {started} " in r.output and "p0001" in r.output
    r = CliRunner().invoke(cli, base_args(tmp_path) + ["frontier", f"{started}-imitation-it1"])
    assert r.exit_code != 0 and "has no frontier recorded yet" in r.output  # only when asked for by name
    assert invoke(base_args(tmp_path) + ["run", "--resume"]).exit_code == 0
    r = invoke(base_args(tmp_path) + ["report"])
    assert "(partial)" not in r.output and "Best vs seed on test" in r.output  # the finished run's own report


@pytest.mark.parametrize("stage", ["[1s] dev 0/4", "rollouts of seed", "evaluating 1 candidates on dev",
                                   "final evaluation on test"])
def test_ctrl_c_in_any_stage_stops_the_run_within_seconds_and_it_resumes(tmp_path, stage):
    """Ctrl-C as a terminal sends it: SIGINT to the whole foreground process group (sandboxed harnesses,
    simulators and all). The run stops within 10 s, its partial report shows what it measured, and
    ``--resume`` finishes it."""
    import threading
    args = base_args(tmp_path) + ["--set=roles.executor.options={delay = 0.2}", "--set=loop.train_per_category=2",
                                  "--set=loop.candidates_per_iteration=1", "--set=loop.patience=9"]
    proc = subprocess.Popen([sys.executable, "-m", "evolver.cli", *args, "run", "--iterations", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            # as at a terminal: a suite started in the background inherits SIGINT ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen, reached = [], threading.Event()

    def read():
        for line in proc.stdout:
            seen.append(line)
            if stage.split("] ")[-1] in line:
                reached.set()
    threading.Thread(target=read, daemon=True).start()
    assert reached.wait(120), "".join(seen)[-2000:]
    time.sleep(0.3)
    start = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"still running 10 s after Ctrl-C at {stage!r}")
    assert time.monotonic() - start < 10 and proc.returncode != 0
    r = invoke(base_args(tmp_path) + ["report"])
    assert "(partial)" in r.output and "| seed |" in r.output or "None yet" in r.output, r.output
    r = invoke(base_args(tmp_path) + ["run", "--resume"])
    assert r.exit_code == 0 and "report:" in r.output, r.output
    assert "(partial)" not in invoke(base_args(tmp_path) + ["report"]).output


def test_traces_is_read_only_binds_its_options_and_names_a_missing_store(tmp_path):
    args = base_args(tmp_path)
    r = CliRunner().invoke(cli, args + ["traces"])
    assert r.exit_code == 2 and f"no store at {tmp_path / 'store' / 'evolver.duckdb'}" in r.output
    assert not (tmp_path / "store").exists()  # a misspelt --store creates nothing
    assert invoke(args + ["eval", "--per-category", "1"]).exit_code == 0
    attacks = ["DELETE FROM episodes", "DROP TABLE steps", f"COPY episodes TO '{tmp_path / 'out.csv'}'",
               f"ATTACH '{tmp_path / 'other.duckdb'}' AS o", "SELECT * FROM read_text('/etc/passwd')"]
    for sql in attacks:
        r = CliRunner().invoke(cli, args + ["traces", sql])
        assert r.exit_code == 2 and "Traceback" not in r.output, (sql, r.output)
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "other.duckdb").exists()
    injected = "x' UNION SELECT 1,2,3,4,5,6,7,8,9; DROP TABLE runs; --"
    r = invoke(args + ["traces", "--run", injected])
    assert r.exit_code == 0 and injected not in r.output
    r = invoke(args + ["traces", "SELECT count(*) AS n FROM episodes"])
    assert int(r.output.strip().splitlines()[-1]) > 0  # nothing was deleted
    assert invoke(args + ["traces", "SELECT count(*) FROM runs"]).exit_code == 0  # nor dropped


def test_a_run_that_stops_on_an_error_is_failed_and_resumes_with_a_corrected_config(tmp_path):
    args = base_args(tmp_path) + ["--set=loop.train_per_category=1"]
    r = CliRunner().invoke(cli, args + ["run", "--iterations", "1", "--set", "plugins.evoskill.mode=chatty"])
    assert r.exit_code == 2 and "proposer 'evoskill': option 'mode'" in r.output and "Traceback" not in r.output
    from evolver.store import Store
    with Store(tmp_path / "store" / "evolver.duckdb", read_only=True) as store:
        failed = store.latest_run()
        assert failed["status"] == "failed" and "chatty" in failed["summary"]["error"]
    r = invoke(args + ["run", "--resume", "--set", "plugins.evoskill.mode=single-call"])
    assert r.exit_code == 0 and "report:" in r.output
    with Store(tmp_path / "store" / "evolver.duckdb", read_only=True) as store:
        row = store.latest_run()
        assert row["run_id"] == failed["run_id"] and row["status"] == "finished"  # the same run, resumed
        assert row["config"]["plugins"]["evoskill"]["mode"] == "single-call"  # the correction is recorded


STEPPER = '''
from evolver import Benchmark, Env, Observation, Task, hookimpl


class Once(Env):
    def __init__(self, task):
        self.task = task

    def reset(self):
        return Observation(self.task.prompt)

    def step(self, action):
        return Observation("ok", score=1.0, done=True, info={"won": True})


class Stepper(Benchmark):
    name = "stepper"

    def __init__(self, max_steps: int = 15):  # its one option, declared
        self.max_steps, self.categories = max_steps, [f"max{max_steps}"]

    def tasks(self, split, per_category=None):
        return [Task(id=f"stepper/{split}/{i}", benchmark="stepper", split=split, category=self.categories[0],
                     seed=i, prompt="say anything", gold="x") for i in range(per_category or 1)]

    def env(self, task):
        return Once(task)


@hookimpl
def register_benchmarks(register):
    register("stepper", Stepper, "a benchmark with a declared option")
'''


def test_eval_benchmark_keeps_the_users_benchmark_options_and_checks_them_first(tmp_path):
    (tmp_path / "evolver.toml").write_text('benchmark = "twx"\nbenchmark_options = { suite = "twx-easy" }\n')
    stepper = tmp_path / "stepper_bench.py"
    stepper.write_text(STEPPER)
    args = ["--plugin", TOY, "--plugin", str(stepper), *ROLES]
    cases = [(["--set=benchmark_options.max_steps=3", "eval", "--benchmark", "stepper"], "max3"),  # global --set
             (["eval", "--benchmark", "stepper", "--set", "benchmark_options.max_steps=4"], "max4"),  # the command's
             (["eval", "--benchmark", "stepper"], "max15")]  # the config's twx options are not the stepper's
    for n, (extra, category) in enumerate(cases):  # a store each: the evaluation cache keys no benchmark options
        r = invoke(args + [f"--store={tmp_path / f'store{n}'}"] + extra + ["--per-category", "1"])
        assert r.exit_code == 0, r.output
        assert [ln.split() for ln in r.output.splitlines() if ln.startswith("max")] == [[category, "1.000"]]
    episode = r.output.split("--episode ")[1].split(")")[0]
    args.append(f"--store={tmp_path / 'store2'}")
    r = invoke(args + ["traces", "--episode", episode])
    assert "task    stepper/dev/0  split dev" in r.output  # the id already names its benchmark: not doubled
    from evolver.store import Store
    with Store(tmp_path / "store2" / "evolver.duckdb", read_only=True) as store:
        runs = store.query("SELECT count(*) FROM runs")[1][0][0]
    r = CliRunner().invoke(cli, args + ["--set=benchmark_options.max_stepz=3", "eval", "--benchmark", "stepper"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "benchmark 'stepper': unknown option 'max_stepz' (benchmark_options.max_stepz); did you mean 'max_steps'?" \
        in r.output and "playing" not in r.output
    r = CliRunner().invoke(cli, args + ["eval", "--benchmark", "stepper", "--per-category", "0"])
    assert r.exit_code == 2 and "--per-category 0: play at least 1 task per category" in r.output
    with Store(tmp_path / "store2" / "evolver.duckdb", read_only=True) as store:
        assert store.query("SELECT count(*) FROM runs")[1][0][0] == runs  # neither recorded a run
