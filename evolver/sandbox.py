"""Run skill scripts and candidate code with limits: time, memory, processes, no network, a minimal view of
the file system, writes only in a scratch folder.

Every run is a subprocess in its own session, killed as a group (SIGKILL) at the timeout and again after it
exits, so stray children die too. ``RLIMIT_AS`` caps its memory (set just before the target is exec'd, not
through ``preexec_fn``, which is unsafe in a threaded parent). Its environment is rebuilt from scratch
(PATH, HOME=TMPDIR=scratch, one thread per BLAS/OpenMP pool, the caller's ``env``): the parent's API keys
never reach it. Each stream keeps at most :data:`OUTPUT_CAP` bytes (head and tail) with a marker saying how
much was cut.

Processes: where a pids cgroup can be created (cgroup v1 ``/sys/fs/cgroup/pids``, or a delegated cgroup v2
subtree; normally as root), every run gets its own, capped at :data:`~evolver.sandbox_cgroup.PIDS_LIMIT` processes and threads
(``EVOLVER_SANDBOX_PIDS`` or the ``pids`` argument; 0 turns the cgroup off), and everything in it is
killed when the run ends, a ``fork`` + ``setsid`` daemon included. Without one there is no process limit
(a warning says so once), but bwrap and unshare still kill every process of the run with its pid
namespace, and the audit guard keeps Python code in the run's process group. (``RLIMIT_NPROC`` is no
substitute: root ignores it, and for anyone else it counts all of the user's processes, not the run's.)

What the code sees (bwrap and unshare; built by :mod:`evolver.sandbox_view` from what it may see, not from
what to hide): read-only, the system directories (``/usr``, ``/bin``, ``/lib*``, ``/sbin``), an ``/etc``
holding only a copy of a short list of world-readable entries (loader cache, passwd/group, time zone,
certificates; made once per process, so one mount), the Python prefixes (venv and base: the interpreter and
its standard library) with every site-packages folder covered by an empty one, a copy of the core's
harness-facing modules (the package ``evolver`` with only :data:`~evolver.sandbox_view.HARNESS_API`), the
installed distributions a caller allows (``packages``: a skill's ``metadata.packages``, a benchmark's
``harness_packages``) with what they require, both on ``PYTHONPATH``, and what the run names: a script's
folder (a skill's whole folder for ``skills/NAME/scripts/x``), the ``visible`` paths, ``PYTHONPATH``
entries, and for :func:`run_python` source the absolute paths its string literals name; read-write, the
scratch folder; a minimal ``/dev`` (a small tmpfs: device nodes, ``/dev/shm``) and a ``/proc`` of its own pid
namespace. Nothing else exists, only the empty folders on the way to what is visible: not the workspace (its
store, other programs), the repository, the core's other modules (the benchmarks among them), any plugin or
benchmark package or its data, the rest of ``/tmp``, ``/root``, ``/run`` or ``/var``, so no host Unix socket
either (abstract ones belong to the host's network namespace): a script cannot regenerate a benchmark's
answers. Symlinks
out of a skill are rejected before any of its scripts runs (``evolver.skills``), and would lead nowhere here
anyway.

Isolation comes from the first mechanism that works here (:func:`sandbox_mechanism`, or ``EVOLVER_SANDBOX``):

- ``bwrap`` (bubblewrap, preferred): the view above built by bwrap on an empty read-only root, new network
  (loopback only), pid, ipc, uts (and, where allowed, user and cgroup) namespaces, no capabilities, a new
  session, killed with its parent. Holds for any program, Python or not.
- ``unshare`` (root without bubblewrap): the same guarantees, built by this module inside ``unshare --net
  --mount --pid`` (``--ns-setup``): a tmpfs root made of bind mounts of the view, ``pivot_root`` into it,
  the host tree detached, every mount but scratch and ``/dev`` remounted read-only (setup fails closed if
  one cannot be), a private ``/dev`` with null/zero/full/random/urandom/tty only, a read-only ``/proc`` of
  the new pid namespace, then every capability dropped (so the script cannot remount anything) and
  ``no_new_privs`` set.
- ``audit`` (fallback): Python scripts run under ``sys.addaudithook``, which denies IP sockets, Unix sockets
  outside scratch, name lookups, writes/renames/deletes outside scratch, starting other programs, reading
  other processes' ``/proc`` entries (the parent's environment), leaving the process group (``setsid``,
  ``setpgid``), and signals to other process groups. It stops mistakes, not an adversary: ctypes and C
  extensions bypass it, every file the user can read is readable (the store, the repository, the
  benchmark), and non-Python scripts get only the time/memory/process limits (their result carries a
  warning saying so). Because of that, choosing it prints a warning, and running code under it raises
  :class:`SandboxUnavailable` unless ``EVOLVER_ALLOW_AUDIT_SANDBOX=1`` is set (install bubblewrap instead:
  ``apt-get install bubblewrap``).
Denials seen by the audit guard are reported in ``SandboxResult.denied``; under the namespace mechanisms a
blocked action fails with the ordinary OS error (EROFS, ENOENT, ENETUNREACH, ECONNREFUSED, EAGAIN) instead.

The in-sandbox parts live in :mod:`evolver.sandbox_inside` (standard library only) and run in a fresh
interpreter on their own (``python -c`` with just that part's source, see ``_own_code``): the namespace
setup (``_ns_setup``) and the audit-guard runner (``_guard_main``).
"""
from __future__ import annotations

import ast
import functools
import gc
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from evolver import tempdirs
from evolver.sandbox_cgroup import cgroup_end, cgroup_new, pids_limit
from evolver.sandbox_inside import DENY_PREFIX
from evolver.sandbox_view import VIEW_PYTHONPATH, UnknownPackage, bwrap_args, view_mounts

OUTPUT_CAP = 64 * 1024  # bytes kept per stream: enough for any useful trace, bounded for a runaway loop
_TAIL = 8 * 1024  # of the cap, what is kept from the end (tracebacks are at the end)
MECHANISMS = ("bwrap", "unshare", "audit")
ALLOW_AUDIT_ENV = "EVOLVER_ALLOW_AUDIT_SANDBOX"
_THIS = os.path.abspath(__file__)
_INSIDE = os.path.join(os.path.dirname(_THIS), "sandbox_inside.py")  # what runs inside: see _own_code
#: The interpreter as the sandbox's view has it: normalised (``bench/../.venv/bin/python`` names a folder
#: the view does not hold), symlinks kept (the venv's python is how site-packages is found).
_PYTHON = os.path.abspath(sys.executable)

_MEMORY_SIGNS = re.compile(r"\bMemoryError\b|Cannot allocate memory|std::bad_alloc|[Oo]ut of memory")
_AUDIT_GAPS = ("it guards Python scripts against mistakes, not an adversary. Unprotected: reading any file the "
               "user can read (the store, the repository, benchmark code and answers), ctypes and C extensions, "
               "non-Python scripts (network and file system), and the number of processes where no pids cgroup "
               "is writable. Install bubblewrap (apt-get install bubblewrap) for isolation; to run candidate "
               f"code under the fallback anyway, set {ALLOW_AUDIT_ENV}=1.")
AUDIT_WARNING = "evolver sandbox: neither bubblewrap nor unshare works here, only the 'audit' fallback: " + _AUDIT_GAPS


class SandboxUnavailable(RuntimeError):
    """Untrusted code was about to run under the ``audit`` fallback without the user's opt-in."""


@dataclass
class SandboxResult:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False
    memory_exceeded: bool = False
    duration_s: float = 0.0
    denied: list[str] = field(default_factory=list)  # audit-guard denials, e.g. "socket.__new__ family=2"
    mechanism: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


# --- choosing the mechanism ---------------------------------------------------------------------------

def _probe(mechanism: str) -> bool:
    scratch = tempdirs.make("evolver-probe-")
    try:
        argv = _wrap(mechanism, ["/bin/sh", "-c", "echo ok > probe && ! touch /evolver-probe 2>/dev/null"],
                     scratch, 256)
        done = subprocess.run(argv, cwd=scratch, env=_base_env(scratch, None), capture_output=True, timeout=20)
        return done.returncode == 0 and (Path(scratch) / "probe").is_file()
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if os.path.exists("/evolver-probe"):  # the mechanism failed to protect /: leave no trace
            os.remove("/evolver-probe")


@functools.lru_cache(maxsize=None)
def _detect() -> str:
    if shutil.which("bwrap") and _probe("bwrap"):
        return "bwrap"
    if os.geteuid() == 0 and shutil.which("unshare") and _probe("unshare"):
        return "unshare"
    warnings.warn(AUDIT_WARNING, RuntimeWarning, stacklevel=3)
    return "audit"


def sandbox_mechanism() -> str:
    """``bwrap``, ``unshare`` or ``audit``: ``EVOLVER_SANDBOX`` if set, else the strongest that works here.
    Falling back to ``audit`` warns (once per process): see :data:`AUDIT_WARNING`."""
    forced = os.environ.get("EVOLVER_SANDBOX", "").strip()
    if forced:
        if forced not in MECHANISMS:
            raise ValueError(f"EVOLVER_SANDBOX={forced!r}; choose one of {', '.join(MECHANISMS)}")
        return forced
    return _detect()


def check_sandbox() -> str:
    """The mechanism candidate code will run under, or :class:`SandboxUnavailable` now, before any work,
    where only the audit fallback works and the user has not opted in."""
    return _require(sandbox_mechanism())


def audit_allowed() -> bool:
    return os.environ.get(ALLOW_AUDIT_ENV, "").strip().lower() in ("1", "true", "yes")


def _require(mechanism: str) -> str:
    if mechanism not in MECHANISMS:
        raise ValueError(f"sandbox mechanism {mechanism!r}; choose one of {', '.join(MECHANISMS)}")
    if mechanism == "audit" and not audit_allowed():
        raise SandboxUnavailable("evolver sandbox: refusing to run untrusted code under the 'audit' fallback "
                                 "(EVOLVER_SANDBOX=audit, or neither bubblewrap nor unshare works here): "
                                 + _AUDIT_GAPS)
    return mechanism


# --- building the command line ----------------------------------------------------------------------------

def _base_env(scratch: str, extra: dict | None) -> dict:
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": scratch, "TMPDIR": scratch,
           "TMP": scratch, "TEMP": scratch, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


@functools.lru_cache(maxsize=None)
def _own_code(part: str) -> list[str]:
    """``python -c`` running one part of this module (``setup`` or ``guard``) on its own: only what that part
    needs is compiled and imported (the whole module's imports cost a new interpreter tens of ms)."""
    text = Path(_INSIDE).read_text()

    def at(line: str) -> int:
        return re.search("^" + re.escape(line), text, re.M).start()
    if part == "setup":
        body = text[at("_MS_RDONLY, _MS_NOSUID"):at("# --- inside the sandbox: the audit guard")]
        main = "_ns_setup(json.loads(sys.argv[1]), sys.argv[3:])"
    else:
        body = text[at("# event -> [(index of a path"):at("def _main(")]
        main = "_guard_main(sys.argv[1:])"
    head = f"import json, os, re, sys, threading\nDENY_PREFIX = {DENY_PREFIX!r}\n_THIS = {_INSIDE!r}\n"
    return [_PYTHON, "-B", "-c", f"{head}{body}\n{main}\n"]


def _wrap(mechanism: str, cmd: list[str], scratch: str, memory_mb: int, visible=(), cgroup: str | None = None,
          packages=(), trusted=()) -> list[str]:
    """The full argv: pids cgroup + memory limit + isolation wrapper + ``cmd``. One shell joins the cgroup,
    sets ``RLIMIT_AS`` (bwrap, tiny, runs under it too) and execs the rest; under ``unshare`` the in-sandbox
    setup sets the memory limit instead."""
    limit_kb = str(int(memory_mb) * 1024)
    join = ['echo $$ > "$2"', "shift"] if cgroup else []
    procs = [os.path.join(cgroup, "cgroup.procs")] if cgroup else []
    if mechanism == "unshare":
        spec = json.dumps({"scratch": scratch, "limit_kb": int(limit_kb),
                           "mounts": view_mounts(scratch, visible, packages, trusted)})
        argv = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--",
                _PYTHON, "-I", "-S", *_own_code("setup")[1:], spec, "--", *cmd]
        if not cgroup:
            return argv
        return ["/bin/sh", "-c", 'echo $$ > "$1" && shift && exec "$@"', "sh", *procs, *argv]
    script = " && ".join([*join[:1], 'ulimit -v "$1"', "shift", *join[1:], 'exec "$@"'])
    shell = ["/bin/sh", "-c", script, "sh", limit_kb, *procs]
    if mechanism == "bwrap":
        caps = ["--cap-drop", "ALL"] if os.geteuid() == 0 else []
        return [*shell, "bwrap", "--unshare-all", "--die-with-parent", "--new-session", *caps, "--dev", "/dev",
                "--proc", "/proc", *bwrap_args(view_mounts(scratch, visible, packages, trusted)), "--chdir", scratch,
                "--", *cmd]
    return [*shell, *cmd]


def parse_python(source: str) -> ast.Module:
    """``ast.parse`` with the garbage collector paused. CPython 3.11 keeps one depth counter while it builds
    the tree's objects; a collection in the middle can run a finaliser that parses too (formatting a
    logged traceback does), and the outer parse then fails with "AST constructor recursion depth mismatch"."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if paused:
            gc.enable()


def _pythonpath(env: dict | None) -> list[str]:
    return [p for p in str((env or {}).get("PYTHONPATH", "")).split(os.pathsep) if os.path.isabs(p)]


def _named_paths(code: str) -> list[str]:
    """Absolute paths of existing files or folders that ``code``'s string literals name (the code is
    composed by evolver, e.g. an import check naming the candidate's folder)."""
    try:
        tree = parse_python(code)
    except (SyntaxError, ValueError):
        return []
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("/")
            and node.value != "/" and len(node.value) < 4096 and "\n" not in node.value and "\0" not in node.value
            and os.path.exists(node.value)]


def _is_python(path: Path) -> bool:
    if path.suffix == ".py":
        return True
    try:
        with open(path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def _command(path: Path, args: list[str], mechanism: str, scratch: str) -> list[str] | str:
    """How to start ``path``, or why it cannot be started."""
    if not path.is_file():
        return f"no such script: {path}"
    if _is_python(path):
        if mechanism == "audit":
            return [*_own_code("guard"), scratch, str(path), *args]
        return [_PYTHON, "-B", str(path), *args]
    if path.suffix == ".sh":
        return ["/bin/sh", str(path), *args]
    if path.suffix == ".bash":
        return ["bash", str(path), *args]
    with open(path, "rb") as f:
        first = f.readline(200)
    if first.startswith(b"#!"):
        return [*first[2:].decode(errors="replace").split(), str(path), *args]
    if os.access(path, os.X_OK):
        return [str(path), *args]
    return f"{path.name}: no known interpreter; name it *.py or *.sh, or start it with a #! line"


def _script_folder(path: Path) -> Path:
    """What a script may read: its skill's folder for ``NAME/scripts/x``, else its own folder."""
    return path.parent.parent if path.parent.name == "scripts" else path.parent


# --- running --------------------------------------------------------------------------------------------

class _Capture(threading.Thread):
    """Drains one pipe, keeping the head and tail within OUTPUT_CAP (a runaway writer must not fill memory)."""

    def __init__(self, pipe):
        super().__init__(daemon=True)
        self.pipe, self.head, self.tail, self.total = pipe, bytearray(), bytearray(), 0
        self.denied: list[str] = []
        self._partial = b""

    def run(self):
        try:
            while chunk := self.pipe.read1(65536):
                self.total += len(chunk)
                room = OUTPUT_CAP - _TAIL - len(self.head)
                self.head += chunk[:max(room, 0)]
                self.tail = (self.tail + chunk[max(room, 0):])[-_TAIL:]
                self._scan(chunk)
        except (OSError, ValueError):
            pass

    def _scan(self, chunk: bytes):
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()[-4096:]
        for line in lines:
            if line.startswith(DENY_PREFIX.encode()) and len(self.denied) < 100:
                self.denied.append(line[len(DENY_PREFIX):].decode(errors="replace").strip())

    def text(self) -> str:
        kept = len(self.head) + len(self.tail)
        if self.total <= kept:
            return (self.head + self.tail).decode(errors="replace")
        cut = self.total - kept
        return (self.head.decode(errors="replace")
                + f"\n[... evolver sandbox: {cut} bytes cut, output is capped at {OUTPUT_CAP} bytes ...]\n"
                + self.tail.decode(errors="replace"))


def _kill_group(pid: int):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _start(cmd: list[str], folder: str, memory_mb: int, env: dict | None, mechanism: str, visible, pids,
           stdin, packages=(), trusted=()) -> tuple[subprocess.Popen, str | None]:
    if mechanism != "audit":  # the view's harness API and allowed packages, then the caller's entries
        env = {**(env or {}), "PYTHONPATH": os.pathsep.join(
            [*VIEW_PYTHONPATH, *filter(None, str((env or {}).get("PYTHONPATH", "")).split(os.pathsep))])}
    cgroup = cgroup_new(pids_limit(pids))
    try:
        argv = _wrap(mechanism, cmd, folder, memory_mb, visible, cgroup, packages, trusted)
        proc = subprocess.Popen(argv, cwd=folder, env=_base_env(folder, env), start_new_session=True,
                                stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except BaseException:
        cgroup_end(cgroup)
        raise
    return proc, cgroup


def _wait(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait for ``proc`` to exit, at most ``timeout_s``; whether it did. With a pidfd the wait ends the moment
    it exits (``Popen.wait(timeout)`` polls with sleeps of up to 50 ms, which added that much to short runs)."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        import select
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and (left := deadline - time.monotonic()) > 0:
            poller.poll(max(1, int(left * 1000)))
    finally:
        os.close(fd)
    return proc.poll() is not None


def _execute(cmd: list[str], scratch: str, timeout_s: float, memory_mb: int, stdin: str | None,
             env: dict | None, mechanism: str, warnings: list[str], visible, pids, packages=()) -> SandboxResult:
    start = time.monotonic()
    proc, cgroup = _start(cmd, scratch, memory_mb, env, mechanism, visible, pids,
                          subprocess.PIPE if stdin is not None else subprocess.DEVNULL, packages)
    out, err = _Capture(proc.stdout), _Capture(proc.stderr)
    out.start(), err.start()
    if stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    timed_out = not _wait(proc, timeout_s)
    _kill_group(proc.pid)  # also after a normal exit: children left in the background die with it
    proc.wait()
    cgroup_end(cgroup)  # and those that left the group
    duration = time.monotonic() - start
    for t in (out, err):
        t.join(timeout=2)  # a child that escaped the group may hold the pipe open: do not wait for it
    for pipe in (proc.stdout, proc.stderr):
        try:
            pipe.close()
        except OSError:
            pass
    stderr = err.text()
    rc = proc.returncode
    memory = not timed_out and rc != 0 and (rc in (-9, 137) or bool(_MEMORY_SIGNS.search(stderr)))
    if timed_out:
        stderr += f"\n[evolver sandbox: killed after the {timeout_s:g} s timeout]\n"
    return SandboxResult(returncode=rc, stdout=out.text(), stderr=stderr, timed_out=timed_out,
                         memory_exceeded=memory, duration_s=round(duration, 3), denied=err.denied,
                         mechanism=mechanism, warnings=warnings)


def _feed(pipe, text: str):
    try:
        pipe.write(text.encode())
        pipe.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def _run(make_cmd, scratch: Path | None, timeout_s: float, memory_mb: int, stdin: str | None,
         env: dict | None, mechanism: str | None, visible, pids, packages=()) -> SandboxResult:
    mechanism = _require(mechanism or sandbox_mechanism())
    own = scratch is None
    folder = tempdirs.make("evolver-sbx-") if own else str(Path(scratch).resolve())
    os.makedirs(folder, exist_ok=True)
    try:
        cmd, warnings = make_cmd(mechanism, folder)
        if isinstance(cmd, str):
            return SandboxResult(returncode=126, stdout="", stderr=cmd + "\n", mechanism=mechanism)
        return _execute(cmd, folder, timeout_s, memory_mb, stdin, env, mechanism, warnings,
                        [*visible, *_pythonpath(env)], pids, packages)
    except UnknownPackage as exc:
        return SandboxResult(returncode=126, stdout="", stderr=f"{exc}\n", mechanism=mechanism)
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)


def run_script(path: Path, args: list[str] = (), scratch: Path | None = None, timeout_s: float = 10,
               memory_mb: int = 512, stdin: str | None = None, env: dict | None = None,
               mechanism: str | None = None, visible=None, pids: int | None = None, packages=()) -> SandboxResult:
    """Run a script (``*.py``, ``*.sh``, ``*.bash``, a ``#!`` file or an executable) in the sandbox, cwd = scratch.

    ``scratch`` defaults to a fresh temporary folder removed afterwards; a given one is kept. The script sees
    (read-only) ``visible``, by default its skill's folder (``NAME/`` for ``NAME/scripts/x``) or its own
    folder, plus the ``PYTHONPATH`` entries of ``env``. ``pids`` caps its processes (default
    :data:`~evolver.sandbox_cgroup.PIDS_LIMIT`). Python in it imports the standard library, the harness API and the installed
    distributions ``packages`` names (a skill's declared ones) with what they require; nothing else. A
    script that cannot be started (a package it may not have, too) gives returncode 126 and the reason in
    ``stderr``, never an exception: candidate code is untrusted input. :class:`SandboxUnavailable` is raised
    only under the ``audit`` fallback without the user's opt-in (see the module doc).
    """
    path = Path(path).resolve()
    visible = [_script_folder(path)] if visible is None else list(visible)

    def make(mech, folder):
        warnings = []
        if mech == "audit" and not _is_python(path):
            warnings.append("sandbox 'audit' guards only Python: this script ran with time and memory limits "
                            "but with network and file-system access (install bubblewrap for full isolation)")
        return _command(path, [str(a) for a in args], mech, folder), warnings
    return _run(make, scratch, timeout_s, memory_mb, stdin, env, mechanism, visible, pids, packages)


def run_python(code_or_path: str | Path, args: list[str] = (), scratch: Path | None = None,
               timeout_s: float = 10, memory_mb: int = 512, stdin: str | None = None, env: dict | None = None,
               mechanism: str | None = None, visible=None, pids: int | None = None, packages=()) -> SandboxResult:
    """Run Python in the sandbox: a :class:`~pathlib.Path` is run as a script, a ``str`` as source code
    (e.g. ``"import harness"`` with ``env={"PYTHONPATH": worktree}`` to import-check candidate code). Source
    sees ``visible``, by default the existing absolute paths its string literals name, and the
    ``PYTHONPATH`` entries of ``env``."""
    if isinstance(code_or_path, Path):
        return run_script(code_or_path, args, scratch, timeout_s, memory_mb, stdin, env, mechanism, visible, pids,
                          packages)
    visible = _named_paths(code_or_path) if visible is None else list(visible)

    def make(mech, folder):
        if mech == "audit":
            return [*_own_code("guard"), folder, "-c", code_or_path, *map(str, args)], []
        return [_PYTHON, "-B", "-c", code_or_path, *map(str, args)], []
    return _run(make, scratch, timeout_s, memory_mb, stdin, env, mechanism, visible, pids, packages)


class Session:
    """A sandboxed Python process kept running for a conversation over its stdin and stdout, with the same
    isolation and limits as :func:`run_python` (the caller enforces time, per message). Its stderr is
    captured like theirs. :meth:`close` kills its whole process group (and pids cgroup) and removes its own
    scratch folder."""

    def __init__(self, proc: subprocess.Popen, stderr: _Capture, folder: str, own: bool, mechanism: str,
                 cgroup: str | None = None):
        self.proc, self._stderr, self.folder, self._own, self.mechanism = proc, stderr, folder, own, mechanism
        self._cgroup = cgroup

    def stderr(self) -> str:
        return self._stderr.text()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        _kill_group(self.proc.pid)
        self.proc.wait()
        cgroup_end(self._cgroup)
        self._cgroup = None
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        self._stderr.join(timeout=2)
        try:
            self.proc.stderr.close()
        except OSError:
            pass
        if self._own:
            shutil.rmtree(self.folder, ignore_errors=True)


def open_python(code: str, scratch: Path | None = None, memory_mb: int = 512, env: dict | None = None,
                mechanism: str | None = None, visible=None, pids: int | None = None, packages=(),
                trusted_packages=()) -> Session:
    """Start ``python -c code`` in the sandbox and leave it running (see :class:`Session`); it sees what
    :func:`run_python` would show it, and ``trusted_packages`` (a benchmark's ``harness_packages``, which
    may name what only its plugin requires). A ``packages`` name that is not installed, or that a skill
    may not declare, raises :class:`~evolver.sandbox_view.UnknownPackage`."""
    mechanism = _require(mechanism or sandbox_mechanism())
    visible = _named_paths(code) if visible is None else list(visible)
    own = scratch is None
    folder = tempdirs.make("evolver-sbx-") if own else str(Path(scratch).resolve())
    cmd = [*_own_code("guard"), folder, "-c", code] if mechanism == "audit" else [_PYTHON, "-B", "-c", code]
    try:
        proc, cgroup = _start(cmd, folder, memory_mb, env, mechanism,
                              [*visible, *_pythonpath(env)], pids, subprocess.PIPE, packages, trusted_packages)
    except BaseException:
        if own:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    err = _Capture(proc.stderr)
    err.start()
    return Session(proc, err, folder, own, mechanism, cgroup)
