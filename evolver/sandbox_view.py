"""What code in the sandbox sees under bwrap and unshare (:mod:`evolver.sandbox` runs it), built from
what it may see, not from a list of what to hide: the system directories, a minimal ``/etc``, the
Python interpreter and its standard library with every site-packages folder hidden whole, a copy of
the core's harness-facing modules (:data:`HARNESS_API`), the distributions a caller allows (a skill's
or a benchmark's declared ``packages``) and what they require, the scratch folder and what a caller
makes visible; as a list of mounts and, for bwrap, its command-line arguments."""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from evolver import tempdirs

_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "passwd", "group",
        "nsswitch.conf", "hosts", "host.conf", "gai.conf", "protocols", "services", "alternatives", "ssl",
        "ca-certificates", "ca-certificates.conf", "os-release", "lsb-release", "debian_version", "mime.types",
        "locale.alias", "magic", "fonts")


#: Where the view puts what code may import, apart from the interpreter's own site-packages (hidden).
VIEW_ROOT = "/.evolver"
API_PATH = VIEW_ROOT + "/api"  # a copy of the core's harness-facing modules (package ``evolver``)
PACKAGES_PATH = VIEW_ROOT + "/packages"  # the allowed distributions' files
#: The core's modules that code in the sandbox may import: the harness interface and what it needs. Not
#: the benchmarks, the store, the repository, the loop or the plugin machinery: a name of ``evolver``'s
#: public API that lives elsewhere raises ModuleNotFoundError there.
HARNESS_API = ("__init__.py", "lazy.py", "errors.py", "types.py", "skills.py", "harness.py", "harness_sandbox.py",
               "tool_calls.py")
#: The distributions those modules import.
API_PACKAGES = ("pyyaml", "jsonschema")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.lru_cache(maxsize=None)
def _distributions() -> dict:
    import importlib.metadata as md
    out = {}
    for d in md.distributions():
        name = d.metadata["Name"] if d.metadata else None
        if name:
            out.setdefault(_norm(name), d)
    return out


def _requires(d, extras: bool = False) -> list[str]:
    out = []
    for req in d.requires or ():
        spec, _, marker = req.partition(";")
        if "extra" in marker and not extras:
            continue
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
        if m:
            out.append(_norm(m[1]))
    return out


class UnknownPackage(ValueError):
    """A package named for the sandbox that is not installed here, or that a skill may not declare."""


def _closure(roots, extras: bool = False) -> set[str]:
    dists, seen, todo = _distributions(), set(), list(roots)
    while todo:
        n = todo.pop()
        if n not in seen and n in dists:
            seen.add(n)
            todo += _requires(dists[n], extras and n == "evolver")
    return seen


@functools.lru_cache(maxsize=None)
def reserved() -> frozenset[str]:
    """Distributions a skill's declaration never opens: evolver itself and its plugins (every benchmark
    among them), and what only they require (a benchmark's game engine and data). What evolver (with
    its extras) or a package installed for its own sake requires is not among them."""
    dists = _distributions()
    plugins = {n for n, d in dists.items() if n == "evolver" or any(ep.group == "evolver" for ep in d.entry_points)}
    required = {r for d in dists.values() for r in _requires(d)}
    keep = _closure({n for n in dists if n not in required and n not in plugins}) \
        | _closure(_requires(dists["evolver"], extras=True) if "evolver" in dists else ())
    return frozenset(plugins | (_closure(plugins) - keep))


@functools.lru_cache(maxsize=None)
def package_mounts(packages: tuple[str, ...], trusted: bool = False) -> tuple[tuple[str, str, str], ...]:
    """Read-only mounts of the installed distributions ``packages`` and what they require (their files
    and metadata, each top-level entry under :data:`PACKAGES_PATH`, so relative paths between them hold).
    A name that is not installed, or (unless ``trusted``: a benchmark's own declaration) one that is
    :func:`reserved`, raises :class:`UnknownPackage` saying so."""
    dists = _distributions()
    missing = [p for p in packages if _norm(p) not in dists]
    if missing:
        raise UnknownPackage(f"not installed here: {', '.join(missing)} (pip install it, or drop it from the "
                             "packages the skill or benchmark declares)")
    seen = _closure(_norm(p) for p in packages)
    barred = sorted(seen & reserved()) if not trusted else []
    if barred:
        raise UnknownPackage(f"a skill may not declare {', '.join(barred)}: evolver and its plugins (the "
                             "benchmarks among them) and what only they require stay out of the sandbox")
    mounts = {}
    for n in sorted(seen):
        d = dists[n]
        tops = {f.parts[0] for f in d.files or () if f.parts}
        listed = d.read_text("top_level.txt")
        tops |= {t.strip() for t in listed.split()} if listed else set()
        for top in tops:
            if not top or top in ("..", "__pycache__") or top.endswith(".pth") or top.startswith("__editable__"):
                continue  # an editable install's finder would lead out of the view
            base = os.path.abspath(str(d.locate_file(top)))
            for src in {base, *map(str, Path(base).parent.glob(f"{top}.*.so"))}:
                if os.path.lexists(src):
                    mounts.setdefault(f"{PACKAGES_PATH}/{os.path.basename(src)}", src)
    return tuple(("ro", src, dest) for dest, src in sorted(mounts.items()))


_API_PREFIX = "evolver-api-"


@functools.lru_cache(maxsize=None)
def _api_folder() -> str:
    """A copy of the :data:`HARNESS_API` modules as package ``evolver``, byte-compiled, made once per
    process (removed at exit): one mount, and none of the core's other modules in it."""
    import compileall
    folder = tempdirs.make(_API_PREFIX, at_exit=True)
    package = os.path.join(folder, "evolver")
    os.mkdir(package)
    here = os.path.dirname(os.path.abspath(__file__))
    for name in HARNESS_API:
        shutil.copy2(os.path.join(here, name), os.path.join(package, name))
    compileall.compile_dir(package, quiet=1)
    os.chmod(folder, 0o755)
    return folder


@functools.lru_cache(maxsize=None)
def _site_dirs() -> tuple[str, ...]:
    """Every folder this interpreter (venv and base) could import installed packages from, and the usual
    system ones: hidden whole in the view, whatever is installed there."""
    import site
    import sysconfig
    found = set(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    if site.ENABLE_USER_SITE:
        found.add(site.getusersitepackages())
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, "/usr", "/usr/local"}:
        for lib in ("lib", "lib64"):
            found |= {os.path.join(prefix, lib, v, sub) for v in (version, "python3")
                      for sub in ("site-packages", "dist-packages")}
    for key in ("purelib", "platlib"):
        for scheme_vars in ({}, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
            try:
                found.add(sysconfig.get_path(key, vars=scheme_vars or None))
            except KeyError:
                continue
    return tuple(sorted(os.path.realpath(p) for p in found if p and os.path.isdir(p)))


@functools.lru_cache(maxsize=None)
def _base_visible() -> tuple[str, ...]:
    import site
    found = [*_SYSTEM, sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))]
    found += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        found.append(site.getusersitepackages())
    return tuple(p for p in found if p and p != "/" and os.path.lexists(p))


_ETC_PREFIX = "evolver-etc-"


@functools.lru_cache(maxsize=None)
def _mini_etc() -> str:
    """A copy of the few ``/etc`` entries programs need, made once per process (removed at exit): one
    mount instead of one per file (each mount makes every sandbox start slower)."""
    folder = tempdirs.make(_ETC_PREFIX, at_exit=True)

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
    """What every run sees: (covered paths, their mounts, the covers of the interpreter's site folders)."""
    kept, mounts = ["/etc"], [("ro", _mini_etc(), "/etc")]
    folders = [p for p in _base_visible() if not os.path.islink(p)]
    _add(_base_visible(), kept, mounts, lambda real: any(_under(real, f) for f in folders))
    hides = tuple(("hide-dir", "", p) for p in _site_dirs() if any(_under(p, k) for k in kept))
    return tuple(kept), tuple(mounts), hides


def view_mounts(scratch: str, visible=(), packages=(), trusted=()) -> list[tuple[str, str, str]]:
    """The mounts, in order: (``ro`` | ``rw``, source, dest), (``link``, target, dest), (``hide-dir`` |
    ``hide-file``, "", dest) covering a site-packages folder, the harness API at :data:`API_PATH`, the
    allowed ``packages`` (with :data:`API_PACKAGES`; none :func:`reserved`) and the ``trusted`` ones (a
    benchmark's ``harness_packages``) under :data:`PACKAGES_PATH`, and last the scratch folder."""
    base_kept, base_mounts, hides = _base_view()
    kept, mounts = list(base_kept), list(base_mounts)
    _add(visible, kept, mounts, lambda real: False)
    allowed = {*package_mounts(tuple(sorted({*API_PACKAGES, *packages}))),
               *(package_mounts(tuple(sorted(trusted)), trusted=True) if trusted else ())}
    allowed = sorted(allowed, key=lambda m: m[2])
    return [*mounts, *(h for h in hides if not _under(scratch, h[2])), ("ro", _api_folder(), API_PATH),
            *allowed, ("rw", scratch, scratch)]


#: ``PYTHONPATH`` inside the view: the harness API, then the allowed packages.
VIEW_PYTHONPATH = (API_PATH, PACKAGES_PATH)


@functools.lru_cache(maxsize=None)
def _bwrap_version() -> tuple[int, ...]:
    try:
        out = subprocess.run(["bwrap", "--version"], capture_output=True, text=True, timeout=10).stdout
        return tuple(int(x) for x in re.search(r"(\d+)\.(\d+)", out).groups())
    except (OSError, subprocess.SubprocessError, AttributeError, ValueError):
        return (0, 0)


def bwrap_args(mounts) -> list[str]:
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
