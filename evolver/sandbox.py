"""Run skill scripts and candidate code with limits: time, memory, no network, writes only in a scratch folder.

Every run is a subprocess in its own session, killed as a group (SIGKILL) at the timeout and again after it
exits, so stray children die too. ``RLIMIT_AS`` caps its memory (set just before the target is exec'd, not
through ``preexec_fn``, which is unsafe in a threaded parent). Its environment is rebuilt from scratch
(PATH, HOME=TMPDIR=scratch, the caller's ``env``): the parent's API keys never reach it. Each stream keeps at
most :data:`OUTPUT_CAP` bytes (head and tail) with a marker saying how much was cut.

Isolation comes from the first mechanism that works here (:func:`sandbox_mechanism`, or ``EVOLVER_SANDBOX``):

- ``bwrap`` (bubblewrap): the whole file system read-only (``/tmp`` included, since scripts and worktrees may
  live there; temporary files go to ``TMPDIR`` = scratch), scratch writable at its own path, a minimal
  ``/dev``, new network (loopback only), pid, ipc and uts namespaces, no capabilities, killed with its
  parent. Holds for any program, Python or not.
- ``unshare`` (root without bubblewrap): the same guarantees, built by this module inside ``unshare --net
  --mount --pid``: every mount remounted read-only (setup fails closed if one cannot be), scratch
  bind-mounted writable, a private ``/dev`` with null/zero/full/random/urandom/tty only, then every
  capability dropped (so the script cannot remount anything) and ``no_new_privs`` set.
- ``audit`` (fallback): Python scripts run under ``sys.addaudithook``, which denies IP sockets, Unix sockets
  outside scratch, name lookups, writes/renames/deletes outside scratch, starting other programs, and
  signals to other process groups. It stops mistakes, not an adversary (ctypes and C extensions bypass
  it). Non-Python scripts get only the time/memory limits, and the result carries a warning saying so.
Denials seen by the audit guard are reported in ``SandboxResult.denied``; under the namespace mechanisms a
blocked action fails with the ordinary OS error (EROFS, ENETUNREACH, ECONNREFUSED) instead.

This module imports only the standard library: it is also executed as a script, as the in-sandbox setup
(``--ns-setup``) and as the audit-guard runner (``--guard``).
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

OUTPUT_CAP = 64 * 1024  # bytes kept per stream: enough for any useful trace, bounded for a runaway loop
_TAIL = 8 * 1024  # of the cap, what is kept from the end (tracebacks are at the end)
DENY_PREFIX = "evolver-sandbox: denied"
MECHANISMS = ("bwrap", "unshare", "audit")
_THIS = os.path.abspath(__file__)
_MEMORY_SIGNS = re.compile(r"\bMemoryError\b|Cannot allocate memory|std::bad_alloc|[Oo]ut of memory")


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
    scratch = tempfile.mkdtemp(prefix="evolver-probe-")
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
    return "audit"


def sandbox_mechanism() -> str:
    """``bwrap``, ``unshare`` or ``audit``: ``EVOLVER_SANDBOX`` if set, else the strongest that works here."""
    forced = os.environ.get("EVOLVER_SANDBOX", "").strip()
    if forced:
        if forced not in MECHANISMS:
            raise ValueError(f"EVOLVER_SANDBOX={forced!r}; choose one of {', '.join(MECHANISMS)}")
        return forced
    return _detect()


# --- building the command line ----------------------------------------------------------------------------

def _base_env(scratch: str, extra: dict | None) -> dict:
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": scratch, "TMPDIR": scratch,
           "TMP": scratch, "TEMP": scratch, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONUNBUFFERED": "1"}
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


def _wrap(mechanism: str, cmd: list[str], scratch: str, memory_mb: int) -> list[str]:
    """The full argv: isolation wrapper + memory limit + ``cmd``."""
    limit_kb = str(int(memory_mb) * 1024)
    ulimit = ["/bin/sh", "-c", 'ulimit -v "$1" && shift && exec "$@"', "sh", limit_kb]
    if mechanism == "bwrap":
        caps = ["--cap-drop", "ALL"] if os.geteuid() == 0 else []
        return ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind", scratch, scratch,
                "--chdir", scratch, "--unshare-all", "--die-with-parent", "--new-session", *caps, "--",
                *ulimit, *cmd]
    if mechanism == "unshare":
        return ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--",
                sys.executable, "-I", "-S", _THIS, "--ns-setup", scratch, limit_kb, "--", *cmd]
    return [*ulimit, *cmd]


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
            return [sys.executable, "-B", _THIS, "--guard", scratch, str(path), *args]
        return [sys.executable, "-B", str(path), *args]
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


def _execute(cmd: list[str], scratch: str, timeout_s: float, memory_mb: int, stdin: str | None,
             env: dict | None, mechanism: str, warnings: list[str]) -> SandboxResult:
    argv = _wrap(mechanism, cmd, scratch, memory_mb)
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=scratch, env=_base_env(scratch, env), start_new_session=True,
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = _Capture(proc.stdout), _Capture(proc.stderr)
    out.start(), err.start()
    if stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    _kill_group(proc.pid)  # also after a normal exit: children left in the background die with it
    proc.wait()
    duration = time.monotonic() - start
    for t in (out, err):
        t.join(timeout=2)  # a child that escaped the group may hold the pipe open: do not wait for it
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
         env: dict | None, mechanism: str | None) -> SandboxResult:
    mechanism = mechanism or sandbox_mechanism()
    own = scratch is None
    folder = tempfile.mkdtemp(prefix="evolver-sbx-") if own else str(Path(scratch).resolve())
    os.makedirs(folder, exist_ok=True)
    try:
        cmd, warnings = make_cmd(mechanism, folder)
        if isinstance(cmd, str):
            return SandboxResult(returncode=126, stdout="", stderr=cmd + "\n", mechanism=mechanism)
        return _execute(cmd, folder, timeout_s, memory_mb, stdin, env, mechanism, warnings)
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)


def run_script(path: Path, args: list[str] = (), scratch: Path | None = None, timeout_s: float = 10,
               memory_mb: int = 512, stdin: str | None = None, env: dict | None = None,
               mechanism: str | None = None) -> SandboxResult:
    """Run a script (``*.py``, ``*.sh``, ``*.bash``, a ``#!`` file or an executable) in the sandbox, cwd = scratch.

    ``scratch`` defaults to a fresh temporary folder removed afterwards; a given one is kept. A script that
    cannot be started gives returncode 126 and the reason in ``stderr``, never an exception: candidate code
    is untrusted input.
    """
    path = Path(path).resolve()

    def make(mech, folder):
        warnings = []
        if mech == "audit" and not _is_python(path):
            warnings.append("sandbox 'audit' guards only Python: this script ran with time and memory limits "
                            "but with network and file-system access (install bubblewrap for full isolation)")
        return _command(path, [str(a) for a in args], mech, folder), warnings
    return _run(make, scratch, timeout_s, memory_mb, stdin, env, mechanism)


def run_python(code_or_path: str | Path, args: list[str] = (), scratch: Path | None = None,
               timeout_s: float = 10, memory_mb: int = 512, stdin: str | None = None, env: dict | None = None,
               mechanism: str | None = None) -> SandboxResult:
    """Run Python in the sandbox: a :class:`~pathlib.Path` is run as a script, a ``str`` as source code
    (e.g. ``"import harness"`` with ``env={"PYTHONPATH": worktree}`` to import-check candidate code)."""
    if isinstance(code_or_path, Path):
        return run_script(code_or_path, args, scratch, timeout_s, memory_mb, stdin, env, mechanism)

    def make(mech, folder):
        guard = [_THIS, "--guard", folder] if mech == "audit" else []
        return [sys.executable, "-B", *guard, "-c", code_or_path, *map(str, args)], []
    return _run(make, scratch, timeout_s, memory_mb, stdin, env, mechanism)


class Session:
    """A sandboxed Python process kept running for a conversation over its stdin and stdout, with the same
    isolation and memory limit as :func:`run_python` (the caller enforces time, per message). Its stderr is
    captured like theirs. :meth:`close` kills its whole process group and removes its own scratch folder."""

    def __init__(self, proc: subprocess.Popen, stderr: _Capture, folder: str, own: bool, mechanism: str):
        self.proc, self._stderr, self.folder, self._own, self.mechanism = proc, stderr, folder, own, mechanism

    def stderr(self) -> str:
        return self._stderr.text()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        _kill_group(self.proc.pid)
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        self._stderr.join(timeout=2)
        if self._own:
            shutil.rmtree(self.folder, ignore_errors=True)


def open_python(code: str, scratch: Path | None = None, memory_mb: int = 512, env: dict | None = None,
                mechanism: str | None = None) -> Session:
    """Start ``python -c code`` in the sandbox and leave it running (see :class:`Session`)."""
    mechanism = mechanism or sandbox_mechanism()
    own = scratch is None
    folder = tempfile.mkdtemp(prefix="evolver-sbx-") if own else str(Path(scratch).resolve())
    guard = [_THIS, "--guard", folder] if mechanism == "audit" else []
    argv = _wrap(mechanism, [sys.executable, "-B", *guard, "-c", code], folder, memory_mb)
    proc = subprocess.Popen(argv, cwd=folder, env=_base_env(folder, env), start_new_session=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = _Capture(proc.stderr)
    err.start()
    return Session(proc, err, folder, own, mechanism)


# --- inside the sandbox: namespace setup (run as root inside `unshare`) -------------------------------------

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND = 1, 2, 4, 8, 32, 4096
_DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9), "tty": (5, 0)}


def _ns_setup(scratch: str, limit_kb: int, cmd: list[str]):
    import ctypes
    import resource
    import stat
    libc = ctypes.CDLL(None, use_errno=True)

    def mount(src, target, fstype, flags, data=None):
        enc = lambda s: s.encode() if s is not None else None  # noqa: E731
        if libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {target}: {os.strerror(err)}")

    mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "size=1m,mode=755")
    for name, (major, minor) in _DEVICES.items():
        os.mknod(f"/dev/{name}", 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(f"/dev/{name}", 0o666)
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"/dev/{name}")
    os.symlink("/proc/self/fd", "/dev/fd")
    os.mkdir("/dev/shm")
    os.chmod("/dev/shm", 0o1777)
    mount(scratch, scratch, None, _MS_BIND)  # its own mount, so it can stay writable below
    with open("/proc/self/mountinfo") as f:
        points = [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), line.split()[4]) for line in f]
    for point in points:
        if point in (scratch, "/dev") or point.startswith("/dev/"):
            continue
        kept = os.statvfs(point).f_flag & (_MS_NOSUID | _MS_NODEV | _MS_NOEXEC)  # same bits as ST_*
        mount(None, point, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | kept)
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    for cap in range(last_cap + 1):  # without CAP_SYS_ADMIN the script cannot undo any of the above
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: setuid binaries gain nothing either
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    resource.setrlimit(resource.RLIMIT_AS, (limit_kb * 1024, limit_kb * 1024))
    os.chdir(scratch)
    os.execvp(cmd[0], cmd)


# --- inside the sandbox: the audit guard for Python (fallback mechanism) ----------------------------------

# event -> [(index of a path argument, index of its dir_fd argument or None)]
_PATH_EVENTS = {
    "os.remove": [(0, 1)], "os.rmdir": [(0, 1)], "os.mkdir": [(0, 2)], "os.chmod": [(0, 2)],
    "os.chown": [(0, 3)], "os.utime": [(0, 3)], "os.truncate": [(0, None)], "os.symlink": [(1, 2)],
    "os.rename": [(0, 2), (1, 3)], "os.link": [(1, 3)], "os.setxattr": [(0, None)],
    "os.removexattr": [(0, None)], "shutil.rmtree": [(0, None)], "os.mkfifo": [(0, None)],
    "os.mknod": [(0, None)],
}
_LOOKUP_EVENTS = {"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo"}
_SPAWN_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.forkpty",
                 "pty.spawn"}


def _install_guard(scratch: str):
    import errno
    import socket
    root = os.path.realpath(scratch)
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    devices = {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"}
    busy = threading.local()

    def inside(path, dir_fd=None) -> bool:
        if path is None or isinstance(path, int):
            return True  # an already-open descriptor: it was checked when it was opened
        path = os.fsdecode(path)
        if path in devices:
            return True
        if dir_fd not in (None, -1) and not os.path.isabs(path):
            path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        real = os.path.realpath(path)  # follows symlinks, so a link in scratch pointing out is caught
        return real == root or real.startswith(root + os.sep)

    def deny(event: str, detail):
        os.write(2, f"{DENY_PREFIX} {event} {detail}\n".encode(errors="replace"))
        raise PermissionError(errno.EACCES, f"evolver sandbox denied {event}", str(detail))

    def check(event: str, args: tuple):
        if event == "open":
            path, mode, flags = args
            writing = bool(mode and set(str(mode)) & set("wax+")) or bool(isinstance(flags, int)
                                                                           and flags & write_flags)
            if writing and not inside(path):
                deny(event, path)
        elif event in _PATH_EVENTS:
            for i, fd_i in _PATH_EVENTS[event]:
                fd = args[fd_i] if fd_i is not None and fd_i < len(args) else None
                if not inside(args[i], fd):
                    deny(event, args[i])
        elif event == "socket.__new__" and args[1] != socket.AF_UNIX:
            deny(event, f"family={args[1]}")
        elif event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"):
            sock, address = args[0], args[-1]
            if sock.family != socket.AF_UNIX or not isinstance(address, (str, bytes)) or not address \
                    or address[:1] in ("\0", b"\0") or not inside(address):
                deny(event, address)
        elif event in _SPAWN_EVENTS:
            deny(event, args[0] if args else "")
        elif event in _LOOKUP_EVENTS:  # the C resolver opens its own sockets, unseen by socket.__new__
            deny(event, args[0] if args else "")
        elif event in ("os.kill", "os.killpg"):
            target = args[0]
            if event == "os.killpg" or target < -1:
                group = abs(target)
            else:  # a pid, 0 (own group) or -1 (every process: never)
                group = os.getpgid(target) if target > 0 else os.getpgrp() if target == 0 else -1
            if group != os.getpgrp():
                deny(event, target)

    def hook(event: str, args: tuple):
        if getattr(busy, "on", False):
            return  # events raised by the checks themselves (realpath, readlink)
        busy.on = True
        try:
            check(event, args)
        except ProcessLookupError:
            pass
        finally:
            busy.on = False

    sys.addaudithook(hook)


def _guard_main(argv: list[str]):
    import runpy
    scratch, target, rest = argv[0], argv[1], argv[2:]
    _install_guard(scratch)
    if target == "-c":
        sys.argv = ["-c", *rest[1:]]
        sys.path[0] = ""
        code = compile(rest[0], "<sandbox>", "exec")
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    else:
        sys.argv = [target, *rest]
        sys.path[0] = os.path.dirname(os.path.abspath(target))  # as if run as `python target`
        runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    if sys.argv[1] == "--ns-setup":
        _ns_setup(sys.argv[2], int(sys.argv[3]), sys.argv[5:])
    elif sys.argv[1] == "--guard":
        _guard_main(sys.argv[2:])
