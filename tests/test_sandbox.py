"""Every isolation mechanism is exercised where it works: `audit` always, `unshare` as root, `bwrap` when
installed; where one does not work its tests are skipped, saying why."""
import os
import shutil
import socket
import time

import pytest

from evolver import sandbox, sandbox_cgroup
from evolver.sandbox import OUTPUT_CAP, run_python, run_script, sandbox_mechanism

WHY_NOT = {
    "bwrap": None if shutil.which("bwrap") else "bubblewrap is not installed (apt-get install bubblewrap)",
    "unshare": None if os.geteuid() == 0 and shutil.which("unshare") else "unshare needs root and util-linux",
}
for _m in ("bwrap", "unshare"):
    if WHY_NOT[_m] is None and not sandbox._probe(_m):
        WHY_NOT[_m] = f"{_m} is installed but cannot build a sandbox here (no namespaces in this container?)"
AVAILABLE = ["audit", *(m for m in ("unshare", "bwrap") if WHY_NOT[m] is None)]
NAMESPACES = [pytest.param(m, marks=pytest.mark.skipif(WHY_NOT[m] is not None, reason=str(WHY_NOT[m])))
              for m in ("bwrap", "unshare")]
PIDS_CGROUP = sandbox_cgroup.cgroup_base() is not None


@pytest.fixture(autouse=True)
def allow_audit(monkeypatch):
    """These tests run the fallback on purpose: the user's opt-in (see test_audit_fallback_warns_and_needs_opt_in)."""
    monkeypatch.setenv(sandbox.ALLOW_AUDIT_ENV, "1")


@pytest.fixture(params=["audit", *NAMESPACES])
def mech(request):
    return request.param


def script(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_mechanism_choice(monkeypatch):
    monkeypatch.delenv("EVOLVER_SANDBOX", raising=False)
    assert sandbox_mechanism() in AVAILABLE
    assert sandbox_mechanism() == AVAILABLE[-1]  # the strongest one that works is chosen
    monkeypatch.setenv("EVOLVER_SANDBOX", "audit")
    assert sandbox_mechanism() == "audit"
    monkeypatch.setenv("EVOLVER_SANDBOX", "chroot")
    with pytest.raises(ValueError, match="bwrap, unshare, audit"):
        sandbox_mechanism()


def test_runs_with_args_stdin_env(tmp_path, mech, monkeypatch):
    monkeypatch.setenv("EVOLVER_TEST_SECRET", "leak")
    path = script(tmp_path, "echo.py", "import os, sys\nprint(sys.argv[1:], sys.stdin.read().upper(), "
                                       "os.environ.get('EVOLVER_TEST_SECRET'), os.environ['MY_VAR'])\n")
    r = run_script(path, ["a", "b"], stdin="hello", env={"MY_VAR": "7"}, mechanism=mech)
    assert r.ok and r.mechanism == mech, r.stderr
    assert r.stdout.strip() == "['a', 'b'] HELLO None 7"  # the parent's environment does not leak in


def test_shell_script_and_unrunnable(tmp_path, mech):
    r = run_script(script(tmp_path, "hi.sh", "echo hi $1\n"), ["there"], mechanism=mech)
    assert r.stdout == "hi there\n" and r.returncode == 0
    assert bool(r.warnings) == (mech == "audit")  # only the audit fallback leaves shell scripts unguarded
    r = run_script(script(tmp_path, "data.txt", "not a program"), mechanism=mech)
    assert r.returncode == 126 and "no known interpreter" in r.stderr
    assert run_script(tmp_path / "absent.py", mechanism=mech).returncode == 126


def test_timeout_kills_script_and_children(tmp_path, mech):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    shell = "(sleep 0.8; touch from-child) &\nsleep 30\n"
    py = ("import os, time\nif os.fork() == 0:\n    time.sleep(0.8)\n    open('from-fork', 'w').close()\n"
          "    os._exit(0)\ntime.sleep(30)\n")
    start = time.monotonic()
    r1 = run_script(script(tmp_path, "hang.sh", shell), scratch=scratch, timeout_s=0.3, mechanism=mech)
    r2 = run_script(script(tmp_path, "hang.py", py), scratch=scratch, timeout_s=0.3, mechanism=mech)
    assert r1.timed_out and r2.timed_out and not r1.ok
    assert "timeout" in r1.stderr
    assert time.monotonic() - start < 5
    time.sleep(1.0)  # the children would have written by now
    assert list(scratch.iterdir()) == []


def test_memory_hog_is_stopped(tmp_path, mech):
    r = run_script(script(tmp_path, "hog.py", "x = bytearray(3_000_000_000)\nprint('allocated')\n"),
                   memory_mb=256, mechanism=mech)
    assert r.memory_exceeded and r.returncode != 0 and "allocated" not in r.stdout
    assert not run_python("x = bytearray(10_000_000); print(len(x))", memory_mb=256, mechanism=mech).memory_exceeded


def test_network_is_denied(tmp_path, mech):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    try:
        code = ("import socket\n"
                "for connect in (lambda: socket.create_connection(('127.0.0.1', %d), timeout=2),\n"
                "                lambda: socket.socket().connect(('127.0.0.1', %d))):\n"
                "    try:\n        connect()\n        print('connected')\n"
                "    except OSError as e:\n        print('failed', e)\n") % (port, port)
        r = run_script(script(tmp_path, "net.py", code), mechanism=mech)
        assert [line.split()[0] for line in r.stdout.splitlines()] == ["failed", "failed"], r.stdout + r.stderr
        with pytest.raises(socket.timeout):
            server.accept()  # nothing reached the listener
        if mech == "audit":
            assert r.denied and r.denied[0].startswith("socket.")
    finally:
        server.close()


def test_writes_only_inside_scratch(tmp_path, mech):
    scratch = tmp_path / "scratch"
    outside = tmp_path / "outside.txt"
    code = f"""import os, shutil, pathlib
pathlib.Path('inside.txt').write_text('ok')
os.mkdir('sub'); os.rename('inside.txt', 'sub/moved.txt')
for action in (lambda: open({str(outside)!r}, 'w'), lambda: os.mkdir({str(tmp_path / 'newdir')!r}),
               lambda: os.rename('sub/moved.txt', {str(outside)!r}), lambda: os.remove({str(tmp_path / 'keep')!r}),
               lambda: os.symlink('/etc', 'etc-link') or open('etc-link/evolver-test', 'w')):
    try:
        action()
        print('allowed')
    except OSError as e:
        print('denied', type(e).__name__)
"""
    (tmp_path / "keep").write_text("keep me")
    r = run_script(script(tmp_path, "write.py", code), scratch=scratch, mechanism=mech)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["denied " + ("PermissionError" if mech == "audit" else "OSError")] * 5, r.stdout
    assert (scratch / "sub" / "moved.txt").read_text() == "ok"
    assert not outside.exists() and not (tmp_path / "newdir").exists() and (tmp_path / "keep").exists()
    assert not os.path.exists("/etc/evolver-test")
    if mech == "audit":
        assert len(r.denied) == 5 and r.denied[0].startswith("open ")
    if mech != "audit":  # the namespace mechanisms hold for any program, not only Python
        r = run_script(script(tmp_path, "w.sh", f"echo x > {outside} || echo refused\necho y > here\n"),
                       scratch=scratch, mechanism=mech)
        assert "refused" in r.stdout and not outside.exists() and (scratch / "here").exists()


def test_default_scratch_is_temporary(mech):
    r = run_python("import os; print(os.getcwd()); open('f', 'w').write('x')", mechanism=mech)
    assert r.ok, r.stderr
    assert not os.path.exists(r.stdout.strip())


def test_output_is_capped_with_marker(mech):
    r = run_python("import sys\nprint('A' * 300_000)\nprint('the end')\nsys.stderr.write('B' * 100_000)",
                   mechanism=mech)
    assert r.ok
    assert len(r.stdout.encode()) < OUTPUT_CAP + 200 and len(r.stderr.encode()) < OUTPUT_CAP + 200
    assert "bytes cut, output is capped" in r.stdout and r.stdout.rstrip().endswith("the end")
    assert "bytes cut" in r.stderr
    small = run_python("print('x' * 1000)", mechanism=mech)
    assert small.stdout == "x" * 1000 + "\n"


def test_run_python_import_check(tmp_path, mech):
    (tmp_path / "harness.py").write_text("VALUE = 42\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    good = run_python("import harness; print(harness.VALUE)", env={"PYTHONPATH": str(tmp_path)}, mechanism=mech)
    bad = run_python("import broken", env={"PYTHONPATH": str(tmp_path)}, mechanism=mech)
    assert good.ok and good.stdout.strip() == "42", good.stderr
    assert bad.returncode != 0 and "SyntaxError" in bad.stderr and not bad.memory_exceeded
    assert run_python(tmp_path / "harness.py", mechanism=mech).ok
    assert not list(tmp_path.glob("__pycache__"))  # nothing written next to candidate code


def test_audit_guard_blocks_programs_and_foreign_signals():
    code = """import os, subprocess
import socket
for action in (lambda: subprocess.run(['true']), lambda: os.system('true'), lambda: os.kill(os.getppid(), 0),
               lambda: os.kill(-1, 0), lambda: socket.getaddrinfo('example.com', 80), lambda: os.kill(os.getpid(), 0)):
    try:
        action()
        print('allowed')
    except OSError:
        print('denied')
"""
    r = run_python(code, mechanism="audit")
    assert r.stdout.split() == ["denied"] * 5 + ["allowed"], r.stderr
    assert [d.split()[0] for d in r.denied] == ["subprocess.Popen", "os.system", "os.kill", "os.kill",
                                                "socket.getaddrinfo"]


def test_parallel_runs_from_threads(mech):
    import threading
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(
        run_python(f"print({i} * 2)", mechanism=mech).stdout.strip())) for i in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(results) == ["0", "2", "4", "6"]


# --- issue 25 part 6: what the sandbox itself must hold --------------------------------------------------

REPO = os.path.dirname(os.path.dirname(os.path.abspath(sandbox.__file__)))


def workspace(tmp_path):
    """A workspace as the loop has one: the store beside the programs, a skill with a script and a reference."""
    ws = tmp_path / "ws"
    skill = ws / "programs" / "p1" / "skills" / "solve"
    (skill / "scripts").mkdir(parents=True)
    (skill / "references").mkdir()
    (skill / "references" / "notes.md").write_text("allowed")
    (ws / "store").mkdir()
    (ws / "store" / "evolver.duckdb").write_text("GOLD ANSWERS")
    (skill / "scripts" / "leak").symlink_to(ws / "store" / "evolver.duckdb")  # the loader rejects these too
    return ws, skill


@pytest.mark.parametrize("mech", NAMESPACES)
def test_only_the_skill_and_the_interpreter_are_visible(tmp_path, mech):
    ws, skill = workspace(tmp_path)
    twx = None
    try:
        import textworld_express
        twx = os.path.dirname(textworld_express.__file__)
    except ImportError:
        pass
    targets = {"store": str(ws / "store" / "evolver.duckdb"), "link": str(skill / "scripts" / "leak"),
               "workspace": str(ws), "plugins": os.path.join(REPO, "plugins"), "repo": os.path.join(REPO, "README.md"),
               "pyproject": os.path.join(REPO, "pyproject.toml"), "benchmark": twx or "/nonexistent"}
    code = f"""import json, os, sys
from pathlib import Path
import evolver.harness, yaml  # the harness API and what it needs
print("reference", Path(__file__).parent.parent.joinpath("references", "notes.md").read_text())
for name, path in {targets!r}.items():
    try:
        if os.path.isdir(path):
            print(name, "listed", [n for n in os.listdir(path) if not n.startswith("__")])
        else:
            print(name, "read", open(path).read()[:20])
    except OSError as e:
        print(name, "refused", type(e).__name__)
"""
    path = skill / "scripts" / "look.py"
    path.write_text(code)
    r = run_script(path, mechanism=mech)
    assert r.ok, r.stderr
    seen = {line.split()[0]: line.split(None, 1)[1] for line in r.stdout.splitlines()}
    assert seen.pop("reference") == "allowed"
    if twx is not None:  # an empty folder covers the benchmark's package: nothing to regenerate answers from
        assert seen.pop("benchmark") in ("listed []", "refused FileNotFoundError"), seen
    seen.pop("benchmark", None)
    assert seen.pop("workspace") == "listed ['programs']"  # only the way down to the skill: no store
    assert all(v.startswith("refused") for v in seen.values()), seen
    assert "GOLD" not in r.stdout


@pytest.mark.parametrize("mech", NAMESPACES)
def test_a_script_imports_only_what_its_skill_declares_and_never_a_benchmark(tmp_path, mech):
    from evolver.sandbox_view import reserved
    probe = script(tmp_path, "probe.py", "import numpy\nprint('numpy', numpy.__name__)\n")
    assert "ModuleNotFoundError" in run_script(probe, mechanism=mech).stderr  # undeclared: not there
    r = run_script(probe, mechanism=mech, packages=["numpy"])
    assert r.ok and r.stdout.strip() == "numpy numpy", r.stderr
    # evolver itself, its plugins and what only they require (a benchmark's engine) cannot be declared
    barred = {"evolver", "evolver-twx"} | ({"textworld-express"} if "textworld-express" in reserved() else set())
    assert barred <= reserved() and "numpy" not in reserved()
    for name in barred:
        r = run_script(probe, mechanism=mech, packages=[name])
        assert r.returncode == 126 and "a skill may not declare" in r.stderr, (name, r.stderr)
    r = run_script(probe, mechanism=mech, packages=["no-such-package"])
    assert r.returncode == 126 and "not installed here: no-such-package" in r.stderr


@pytest.mark.parametrize("mech", NAMESPACES)
def test_a_sandboxed_harness_sees_its_program_but_not_the_store(tmp_path, mech):
    from test_harness_sandbox import program, with_next_call

    from evolver.harness import program_context
    from evolver.harness_sandbox import RemoteHarnessError, SandboxedHarness
    from evolver.types import Observation, Task

    ws, _ = workspace(tmp_path)
    body = f"        self.secret = open({str(ws / 'store' / 'evolver.duckdb')!r}).read()\n"
    h = SandboxedHarness(program_context(program(ws / "programs", with_next_call(body), "p2")), mechanism=mech)
    try:
        state = h.start(Task("t", "b", "train", "c"), Observation("x"))  # its skills and prompt were readable
        with pytest.raises(RemoteHarnessError, match="FileNotFoundError"):
            h.next_call(state, Observation("x"))
    finally:
        h.close()


@pytest.mark.skipif(not PIDS_CGROUP, reason="no writable pids cgroup here: sandboxed code has no process limit")
def test_a_fork_bomb_is_capped_and_cleaned_up(tmp_path, mech):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = """import os, time
born = 0
for i in range(300):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(1.5)
        open(f"alive-{i}", "w").close()
        os._exit(0)
    born += 1
print(born)
"""
    r = run_script(script(tmp_path, "bomb.py", code), scratch=scratch, mechanism=mech, pids=32, timeout_s=20)
    assert r.returncode == 0, r.stderr
    assert 0 < int(r.stdout) < 32
    time.sleep(2.0)  # the children would have written by now
    assert list(scratch.iterdir()) == []
    base = sandbox_cgroup.cgroup_base()
    assert not [n for n in os.listdir(base) if n.startswith(f"evolver-sbx-{os.getpid()}-")]  # removed too


def test_a_daemon_that_leaves_the_process_group_is_killed(tmp_path, mech):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = """import os, time
if os.fork() == 0:
    try:
        os.setsid()
    except OSError:
        pass
    if os.fork() == 0:
        time.sleep(1.0)
        open("daemon-alive", "w").close()
    os._exit(0)
print("parent done")
"""
    r = run_script(script(tmp_path, "daemon.py", code), scratch=scratch, mechanism=mech)
    assert r.ok and r.stdout.strip() == "parent done", r.stderr
    time.sleep(1.6)
    assert not (scratch / "daemon-alive").exists()


def test_no_host_unix_sockets(tmp_path, mech):
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "host.sock"))
    server.listen(1)
    server.settimeout(0.2)
    code = f"""import socket
try:
    socket.socket(socket.AF_UNIX).connect({str(tmp_path / 'host.sock')!r})
    print("connected")
except OSError as e:
    print("failed", type(e).__name__)
"""
    (tmp_path / "skill").mkdir()  # the script's own folder is visible; the socket is one level up
    try:
        r = run_script(script(tmp_path / "skill", "unix.py", code), mechanism=mech)
        assert r.stdout.split()[0] == "failed", r.stdout + r.stderr
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()


def test_audit_guard_hides_the_parents_environment(monkeypatch):
    monkeypatch.setenv("EVOLVER_TEST_KEY", "sk-secret")
    code = f"""import os
for path in ("/proc/{os.getpid()}/environ", "/proc/self/environ"):
    try:
        print(path.split("/")[2], "sk-secret" in open(path).read())
    except OSError:
        print(path.split("/")[2], "denied")
"""
    r = run_python(code, mechanism="audit")
    assert r.stdout.split() == [str(os.getpid()), "denied", "self", "False"], r.stdout + r.stderr


def test_audit_fallback_warns_and_needs_opt_in(monkeypatch):
    monkeypatch.delenv(sandbox.ALLOW_AUDIT_ENV)
    with pytest.raises(sandbox.SandboxUnavailable, match="EVOLVER_ALLOW_AUDIT_SANDBOX=1") as err:
        run_python("print(1)", mechanism="audit")
    assert "apt-get install bubblewrap" in str(err.value)
    with pytest.raises(sandbox.SandboxUnavailable):
        sandbox.open_python("print(1)", mechanism="audit")
    monkeypatch.setenv("EVOLVER_SANDBOX", "audit")  # forcing it is not consent
    with pytest.raises(sandbox.SandboxUnavailable):
        run_script(os.path.abspath(__file__), mechanism=None)
    monkeypatch.delenv("EVOLVER_SANDBOX")
    monkeypatch.setattr(sandbox, "_probe", lambda mechanism: False)  # a machine with neither bwrap nor unshare
    sandbox._detect.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="only the 'audit' fallback.*apt-get install bubblewrap"):
            assert sandbox_mechanism() == "audit"
    finally:
        sandbox._detect.cache_clear()
    monkeypatch.setenv(sandbox.ALLOW_AUDIT_ENV, "1")
    assert run_python("print(1)", mechanism="audit").stdout == "1\n"


@pytest.mark.skipif(WHY_NOT["bwrap"] is not None, reason=str(WHY_NOT["bwrap"]))
def test_bwrap_is_preferred(monkeypatch):
    monkeypatch.delenv("EVOLVER_SANDBOX", raising=False)
    assert sandbox_mechanism() == "bwrap"


def test_run_refuses_before_any_work_where_only_the_audit_fallback_works(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from evolver.cli import cli

    monkeypatch.setenv("EVOLVER_SANDBOX", "audit")
    monkeypatch.delenv("EVOLVER_ALLOW_AUDIT_SANDBOX", raising=False)
    r = CliRunner().invoke(cli, ["--store", str(tmp_path / "ws"), "run", "--set", "benchmark=\"basic\""])
    assert r.exit_code == 2 and "EVOLVER_ALLOW_AUDIT_SANDBOX=1" in r.output and "bubblewrap" in r.output
    assert not (tmp_path / "ws").exists()  # nothing recorded, nothing played


def test_an_interpreter_named_through_dotdot_still_runs_in_the_sandbox(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable)
    roundabout = f"{exe.parent}/../{exe.parent.name}/{exe.name}"  # as `cd bench && ../.venv/bin/python` names it
    code = "from evolver.sandbox import run_python; r = run_python('print(6 * 7)'); print(r.stdout.strip(), r.returncode)"
    out = subprocess.run([roundabout, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.stdout.split()[-2:] == ["42", "0"], out.stdout + out.stderr
