"""The parts of the sandbox that run inside it, each in a fresh interpreter: the namespace setup that
``unshare`` runs as root before it drops every capability (``_ns_setup``), and the audit-hook guard of the
fallback mechanism (``_guard_main``). What they guarantee is told in :mod:`evolver.sandbox`, which starts
them.

Standard library only, and nothing from the rest of evolver: :func:`evolver.sandbox._own_code` runs each
part with ``python -c`` and just that part's source (a new interpreter would spend tens of ms importing
more); ``python sandbox_inside.py --ns-setup|--guard`` runs them too.
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading

DENY_PREFIX = "evolver-sandbox: denied"
_THIS = os.path.abspath(__file__)


# --- inside the sandbox: namespace setup (run as root inside `unshare`) -------------------------------------

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND = 1, 2, 4, 8, 32, 4096
_MS_REC, _MS_PRIVATE, _MNT_DETACH = 16384, 1 << 18, 2
_DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9), "tty": (5, 0)}
_SYS_PIVOT_ROOT = {"x86_64": 155, "amd64": 155, "aarch64": 41, "arm64": 41, "riscv64": 41, "loongarch64": 41,
                   "ppc64le": 203, "ppc64": 203, "s390x": 217, "i686": 217, "i386": 217, "armv7l": 218}


def _ns_setup(spec: dict, cmd: list[str]):
    import ctypes
    import resource
    import stat
    libc = ctypes.CDLL(None, use_errno=True)
    scratch, limit_kb = spec["scratch"], int(spec["limit_kb"])

    def check(ret, what):
        if ret != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def mount(src, target, fstype, flags, data=None):
        enc = lambda s: s.encode() if s is not None else None  # noqa: E731
        check(libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")

    def pivot_root(new, old):
        number = _SYS_PIVOT_ROOT.get(os.uname().machine)
        if number is None:
            raise OSError(f"pivot_root: unknown syscall number on {os.uname().machine}")
        check(libc.syscall(ctypes.c_long(number), new.encode(), old.encode()), "pivot_root")

    # An empty root (tmpfs at /tmp, moved to / by pivot_root: the host tree is then at /oldroot, its own /tmp
    # uncovered), filled with the view's mounts under /newroot, which becomes / in turn.
    mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=755")
    os.chdir("/tmp")
    os.mkdir("newroot", 0o755)
    mount("newroot", "newroot", None, _MS_BIND | _MS_REC)
    os.mkdir("oldroot", 0o755)
    pivot_root("/tmp", "oldroot")
    os.chdir("/")
    new = "/newroot"
    os.mkdir(f"{new}/dev", 0o755)
    mount("tmpfs", f"{new}/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "size=1m,mode=755")
    for name, (major, minor) in _DEVICES.items():
        os.mknod(f"{new}/dev/{name}", 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(f"{new}/dev/{name}", 0o666)
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"{new}/dev/{name}")
    os.symlink("/proc/self/fd", f"{new}/dev/fd")
    os.mkdir(f"{new}/dev/shm")
    os.chmod(f"{new}/dev/shm", 0o1777)
    os.mkdir(f"{new}/proc", 0o555)
    mount("proc", f"{new}/proc", "proc", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)  # this pid namespace's
    for kind, src, dest in spec["mounts"]:
        target = new + dest
        if kind == "link":
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(src, target)
        elif kind in ("ro", "rw"):
            source = "/oldroot" + src
            if os.path.isdir(source):
                os.makedirs(target, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                if not os.path.lexists(target):
                    open(target, "x").close()
            mount(source, target, None, _MS_BIND | _MS_REC)
        elif kind == "hide-dir":
            mount("tmpfs", target, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV, "size=4k,mode=555")
        elif kind == "hide-file":
            mount(f"{new}/dev/null", target, None, _MS_BIND)
    mount(None, "/oldroot", None, _MS_REC | _MS_PRIVATE)
    check(libc.umount2(b"/oldroot", _MNT_DETACH), "umount /oldroot")
    os.chdir(new)
    pivot_root(".", ".")
    check(libc.umount2(b".", _MNT_DETACH), "umount the old root")
    os.chdir("/")
    with open("/proc/self/mountinfo") as f:
        points = [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), line.split()[4]) for line in f]
    for point in points:
        if point in (scratch, "/dev") or point.startswith("/dev/"):
            continue
        flags = os.statvfs(point).f_flag  # ST_* bits, the same as MS_*
        if not flags & _MS_RDONLY:  # the covers and /proc were mounted read-only already
            kept = flags & (_MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
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

    trusted = tuple(os.path.join(os.path.realpath(p), "") for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                                    os.path.dirname(_THIS)))

    def foreign_proc(path) -> bool:
        """``/proc/PID/...`` of another process (its environ holds the parent's secrets)."""
        if path is None or isinstance(path, int):
            return False
        path = os.fsdecode(path)
        if path.startswith(trusted):  # imports: no link there leads to /proc (the guard denies making one)
            return False
        m = re.match(r"/proc/(\d+)(?:/|$)", os.path.realpath(path))
        return bool(m) and int(m[1]) != os.getpid() and not os.path.exists(f"/proc/self/task/{m[1]}")

    def check(event: str, args: tuple):
        if event == "open":
            path, mode, flags = args
            writing = bool(mode and set(str(mode)) & set("wax+")) or bool(isinstance(flags, int)
                                                                           and flags & write_flags)
            if writing and not inside(path) or foreign_proc(path):
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

    def stay(name):  # no audit event for these: leaving the process group would outlive the sandbox's kill
        def denied(*args):
            deny(f"os.{name}", args)
        return denied
    for name in ("setsid", "setpgid", "setpgrp"):
        if hasattr(os, name):
            setattr(os, name, stay(name))


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


def _main(argv: list[str]):
    if argv[0] == "--ns-setup":
        _ns_setup(json.loads(argv[1]), argv[3:])
    elif argv[0] == "--guard":
        _guard_main(argv[1:])


if __name__ == "__main__":
    _main(sys.argv[1:])
