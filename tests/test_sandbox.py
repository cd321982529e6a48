"""Every available isolation mechanism is exercised: `audit` always, `unshare` as root, `bwrap` when installed."""
import os
import shutil
import socket
import time

import pytest

from evolver import sandbox
from evolver.sandbox import OUTPUT_CAP, run_python, run_script, sandbox_mechanism


def _available():
    found = ["audit"]
    if os.geteuid() == 0 and shutil.which("unshare") and sandbox._probe("unshare"):
        found.append("unshare")
    if shutil.which("bwrap") and sandbox._probe("bwrap"):
        found.append("bwrap")
    return found


AVAILABLE = _available()


@pytest.fixture(params=AVAILABLE)
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
