"""The plugin manager: built-ins, entry points, local plugin files, hook tracing.

Built-in benchmarks and backends are ordinary plugins (``evolver/default_plugins.py``) registered
through the same hooks third-party plugins use. Third-party and first-party plugins (``plugins/``)
are found through the entry-point group ``evolver``.

Environment variables:
- ``EVOLVER_PLUGINS=a,b``: load only these entry-point plugins (empty string: none). The test
  suite sets it to keep an installed plugin from changing results.
- ``EVOLVER_TRACE_PLUGINS=1``: print every hook call with its arguments and results to stderr.
- ``EVOLVER_PLUGIN_PATH=file.py:folder``: extra local plugins, like ``--plugin``.
"""
from __future__ import annotations

import difflib
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import os
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pluggy
import pydantic

from evolver import hookspecs
from evolver.errors import PluginError, UnknownNameError

GROUP = "evolver"
#: The names the default config (and the docs) use that first-party plugins bring, with the entry point
#: (and folder under plugins/) of each: only the unknown-name error reads this, to say what to install.
#: Nothing in the core imports these plugins or depends on what they do.
FIRST_PARTY = {("benchmark", "twx"): "twx", ("backend", "transformers"): "transformers",
               ("backend", "vllm"): "vllm", ("proposer", "imitation"): "experience",
               ("proposer", "expert-iteration"): "experience", ("proposer", "skill-miner"): "experience",
               ("proposer", "evoskill"): "evoskill", ("profile", "default"): "twx",
               ("report_format", "html"): "ui"}
KINDS = ("benchmark", "backend", "proposer", "trainer", "harness", "selector", "report_format", "cluster", "profile")
HOOK_OF = {kind: f"register_{kind}es" if kind.endswith("s") else f"register_{kind}s" for kind in KINDS}


@dataclass
class Entry:
    name: str
    factory: Any
    description: str = ""
    plugin: str = ""


@dataclass
class Registry:
    """Name -> factory for one kind of thing; duplicate names are an error naming both plugins."""

    kind: str
    entries: dict[str, Entry] = field(default_factory=dict)

    def register(self, plugin: str) -> Callable:
        def register(name: str, factory: Any, description: str = "", **_: Any) -> None:
            if name in self.entries and self.entries[name].plugin != plugin:
                raise PluginError(f"{self.kind} {name!r} is registered twice: by {self.entries[name].plugin} "
                                  f"and by {plugin}; uninstall one or set EVOLVER_PLUGINS")
            self.entries[name] = Entry(name, factory, description, plugin)
        return register

    def get(self, name: str) -> Entry:
        if name not in self.entries:
            close = difflib.get_close_matches(name, list(self.entries), n=1, cutoff=0.6)
            hint = "; ".join(filter(None, [f"did you mean {close[0]!r}?" if close else "",
                                           _install_hint(self.kind, name) or _local_hint(self.kind)]))
            raise UnknownNameError(self.kind, name, list(self.entries), hint)
        return self.entries[name]

    def names(self) -> list[str]:
        return sorted(self.entries)


def _install_hint(kind: str, name: str) -> str:
    """What brings a first-party ``kind`` ``name`` that is not registered: install its plugin, or let
    EVOLVER_PLUGINS load it."""
    plugin = FIRST_PARTY.get((kind, name))
    if plugin is None:
        return ""
    if plugin in {ep.name for ep in importlib.metadata.entry_points(group=GROUP)}:
        allowed = os.environ.get("EVOLVER_PLUGINS")
        left_out = allowed is not None and plugin not in {n.strip() for n in allowed.split(",")}
        return (f"{kind} {name!r} comes with the installed plugin {plugin!r}, which is not loaded"
                + (f": EVOLVER_PLUGINS={allowed!r} leaves it out" if left_out else ""))
    return (f"{kind} {name!r} comes with the evolver-{plugin} plugin, which is not installed: "
            f"pip install -e plugins/{plugin} (every first-party plugin: pip install -r plugins/requirements.txt)")


def _local_hint(kind: str) -> str:
    """Where a third-party ``kind`` comes from: a plugin file or folder, or an installed package."""
    installed = sorted({ep.name for ep in importlib.metadata.entry_points(group=GROUP)})
    allowed = os.environ.get("EVOLVER_PLUGINS")
    only = None if allowed is None else {n.strip() for n in allowed.split(",") if n.strip()}
    left_out = [n for n in installed if only is not None and n not in only]
    return (f"a {kind} of your own loads with `evolver --plugin FILE|FOLDER ...` (or EVOLVER_PLUGIN_PATH); "
            f"installed plugins (entry points in group {GROUP!r}): {', '.join(installed) or '(none)'}"
            + (f" (EVOLVER_PLUGINS={allowed!r} leaves out {', '.join(left_out)})" if left_out else ""))


_pm: pluggy.PluginManager | None = None
_registries: dict[str, Registry] | None = None
_local_loaded: list[str] = []


def _new_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(GROUP)
    pm.add_hookspecs(hookspecs)
    from evolver import default_plugins

    pm.register(default_plugins, name="evolver.default_plugins")
    if os.environ.get("EVOLVER_TRACE_PLUGINS"):
        def before(hook_name, hook_impls, kwargs):
            shown = {k: _short(v) for k, v in kwargs.items()}
            print(f"[hook] {hook_name}({shown}) -> {[i.plugin_name for i in hook_impls]}", file=sys.stderr)

        def after(outcome, hook_name, hook_impls, kwargs):
            try:
                print(f"[hook] {hook_name} returned {_short(outcome.get_result())}", file=sys.stderr)
            except BaseException as exc:  # the hook raised: show that instead
                print(f"[hook] {hook_name} raised {exc!r}", file=sys.stderr)
        pm.add_hookcall_monitoring(before, after)
    return pm


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    allowed = os.environ.get("EVOLVER_PLUGINS")
    only = None if allowed is None else {n.strip() for n in allowed.split(",") if n.strip()}
    installed = {ep.name for ep in importlib.metadata.entry_points(group=GROUP)}
    if only and only - installed:
        missing = sorted(only - installed)
        raise PluginError(f"EVOLVER_PLUGINS names {', '.join(map(repr, missing))}, which "
                          f"{'is' if len(missing) == 1 else 'are'} not installed; installed plugins: "
                          f"{', '.join(sorted(installed)) or '(none)'}")
    for ep in importlib.metadata.entry_points(group=GROUP):
        if only is not None and ep.name not in only:
            continue
        if pm.get_plugin(ep.name) is not None:
            continue
        try:
            module = ep.load()
        except (Exception, SystemExit) as exc:  # a plugin that calls sys.exit must not end the run silently
            raise PluginError(f"plugin {ep.name!r} ({ep.value}, from package "
                              f"{ep.dist.name if ep.dist else '?'}) failed to import: {exc!r}\n"
                              f"{_tail(traceback.format_exc())}\n"
                              f"Fix or uninstall it, or skip it with EVOLVER_PLUGINS=<the others>.") from exc
        pm.register(module, name=ep.name)


def _tail(tb: str, lines: int = 6) -> str:
    return "\n".join(tb.strip().splitlines()[-lines:])


def load_local(path: str | Path, pm: pluggy.PluginManager | None = None) -> str:
    """Load a plugin from a .py file or a folder.

    A file is imported and registered; its folder goes on ``sys.path`` (appended), so it can import a
    helper module beside it. A folder is a package: with an ``__init__.py``, the package is imported
    (under its folder's name when that is free) and registered, its parent folder on ``sys.path``;
    without one, the folder goes on ``sys.path`` and only its top-level modules whose source mentions
    ``hookimpl`` are imported, each registered when it defines a hook implementation. Other files there
    (helpers, scripts) are never run by the loader, only imported by the plugin's own ``import``."""
    pm = pm or manager()
    path = Path(path).resolve()
    if not path.exists():
        raise PluginError(f"plugin path {path} does not exist")
    if path.is_file():
        files, search = [path], path.parent
    elif (path / "__init__.py").exists():
        files, search = [path / "__init__.py"], path.parent
    else:
        files = [f for f in sorted(path.glob("*.py")) if "hookimpl" in f.read_text(errors="replace")]
        search = path
        if not files:
            raise PluginError(f"plugin folder {path} has no module that defines hook implementations "
                              "(@hookimpl functions); see docs/plugins.md")
    if str(search) not in sys.path:
        sys.path.append(str(search))
    name = f"local:{path}"
    registered = 0
    for file in files:
        module = _import_file(file)
        if not any(pm.parse_hookimpl_opts(module, attr) is not None for attr in dir(module)):
            continue  # mentions hookimpl but implements no hook: a helper, not a plugin
        plugin_name = f"local:{file}"
        registered += 1
        if pm.get_plugin(plugin_name) is None:
            pm.register(module, name=plugin_name)
            _check_hooks(pm, plugin_name)
    if not registered:
        raise PluginError(f"local plugin {path} defines no hook implementation (an @hookimpl function named "
                          "after a hook in evolver/hookspecs.py); see docs/plugins.md")
    global _registries
    _registries = None  # registrations changed
    _local_loaded.append(str(path))
    return name


def local_paths() -> list[str]:
    """The local plugin files and folders loaded so far (a cluster worker loads the same ones)."""
    return list(_local_loaded)


def _import_file(file: Path):
    """Import one plugin file: under its own name (its folder's, for a package) when that is free, so a
    sibling module's ``import`` of it finds the same module; otherwise under a private name."""
    package = file.name == "__init__.py"
    own = file.parent.name if package else file.stem
    here = str(file.parent.parent if package else file.parent)
    elsewhere = [p for p in sys.path if p != here]  # a name an installed module has stays that module's
    free = (own.isidentifier() and own not in sys.modules
            and importlib.machinery.PathFinder.find_spec(own, elsewhere) is None)
    mod_name = own if free else f"evolver_local_{abs(hash(str(file)))}"
    try:
        spec = importlib.util.spec_from_file_location(
            mod_name, file, submodule_search_locations=[str(file.parent)] if package else None)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(mod_name, None)
        raise PluginError(f"local plugin {file} failed to import: {exc!r}\n{_tail(traceback.format_exc())}") from exc
    return module


def manager() -> pluggy.PluginManager:
    global _pm
    if _pm is None:
        pm = _new_manager()
        _load_entry_points(pm)
        for extra in filter(None, os.environ.get("EVOLVER_PLUGIN_PATH", "").split(os.pathsep)):
            load_local(extra, pm)
        _check_hooks(pm)
        _pm = pm
    return _pm


def _check_hooks(pm: pluggy.PluginManager, plugin: str | None = None) -> None:
    """A hook implementation that matches no hook (a misspelt name) is an error, not silence."""
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        known = [name for name in dir(hookspecs) if not name.startswith("_") and callable(getattr(hookspecs, name))]
        names = [name for name in dir(pm.hook) if not name.startswith("_")]
        pending = [name for name in names if not getattr(pm.hook, name).has_spec()]
        hints = [f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name) for name in pending
                 for close in [difflib.get_close_matches(name, known, n=1, cutoff=0.6)]]
        if plugin:
            pm.unregister(name=plugin)
        raise PluginError(f"{'plugin ' + plugin if plugin else 'a plugin'} implements unknown hooks: "
                          f"{', '.join(hints) or exc}; the hooks are in evolver/hookspecs.py") from exc


def reset() -> None:
    """Forget loaded plugins (tests use this between cases)."""
    global _pm, _registries
    _pm, _registries = None, None
    _local_loaded.clear()


def registries() -> dict[str, Registry]:
    global _registries
    if _registries is None:
        pm = manager()
        regs = {kind: Registry(kind) for kind in KINDS}
        plugins = [p for _, p in pm.list_name_plugin()]
        for kind in KINDS:
            hook_name = HOOK_OF[kind]
            for impl in getattr(pm.hook, hook_name).get_hookimpls():
                # One plugin at a time (through the hook, so tracing sees it) to know who registered what.
                others = [p for p in plugins if p is not impl.plugin]
                caller = pm.subset_hook_caller(hook_name, remove_plugins=others)
                try:
                    caller(register=regs[kind].register(impl.plugin_name))
                except PluginError:
                    raise
                except (Exception, SystemExit) as exc:
                    raise PluginError(f"plugin {impl.plugin_name!r} failed in {hook_name}: {exc!r}") from exc
        _registries = regs
    return _registries


def migrations() -> dict[str, list[Callable]]:
    """Every loaded plugin's store migrations (hook ``register_migrations``): plugin key -> functions.
    A key registered by two plugins is an error naming both."""
    pm = manager()
    found: dict[str, tuple[str, list[Callable]]] = {}
    loaded = [p for _, p in pm.list_name_plugin()]
    for impl in pm.hook.register_migrations.get_hookimpls():
        def register(plugin: str, fns: list[Callable], _by: str = impl.plugin_name) -> None:
            if plugin in found and found[plugin][0] != _by:
                raise PluginError(f"store migrations {plugin!r} are registered twice: by {found[plugin][0]} "
                                  f"and by {_by}; uninstall one or set EVOLVER_PLUGINS")
            found[plugin] = (_by, list(fns))
        # One plugin at a time, as registries() does, to know who registered what.
        caller = pm.subset_hook_caller("register_migrations", [p for p in loaded if p is not impl.plugin])
        try:
            caller(register=register)
        except PluginError:
            raise
        except Exception as exc:
            raise PluginError(f"plugin {impl.plugin_name!r} failed in register_migrations: {exc!r}") from exc
    return {plugin: fns for plugin, (_, fns) in found.items()}


def get(kind: str, name: str) -> Entry:
    return registries()[kind].get(name)


def profile_text(name: str) -> str:
    """The configuration text of profile ``name`` (hook ``register_profiles``); :class:`UnknownNameError`
    listing the known ones."""
    entry = get("profile", name)
    return str(entry.factory() if callable(entry.factory) else entry.factory)


def make(kind: str, name: str, **options: Any) -> Any:
    """Build a registered ``kind`` (``"backend"``, ``"benchmark"``, ...) by name: ``factory(**options)``.
    Unknown names raise :class:`UnknownNameError` listing the known ones; rejected options, :class:`PluginError`."""
    entry = get(kind, name)
    if kind == "benchmark":
        check_benchmark(name, options)
    if kind == "benchmark":
        _warn_unnamed(name, entry.factory, options)
    try:
        return entry.factory(**options)
    except TypeError as exc:
        raise PluginError(f"{kind} {name!r} rejected its options {sorted(options)}: {exc}") from exc
    except pydantic.ValidationError as exc:  # a plugin's own options model: say which key, as the config does
        raise PluginError(f"{kind} {name!r}: {_explain_options(entry, exc)} (set under [plugins.{name}])") from exc
    except ImportError as exc:  # a plugin installed without what it needs (pip --no-deps, a partial install)
        missing = getattr(exc, "name", None) or str(exc)
        raise PluginError(f"{kind} {name!r} cannot be built: it needs {missing!r}, which is not installed ({exc}). "
                          "Install the plugin with its dependencies (every first-party plugin: "
                          "pip install -r plugins/requirements.txt)") from exc


def _warn_unnamed(name: str, factory, options: dict) -> None:
    """A benchmark factory that takes ``**kwargs`` cannot refuse a misspelt option itself: warn of each
    option it does not name, with the nearest name it does."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return
    named = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unnamed = [k for k in options if k not in named]
    if unnamed and any(p.kind is p.VAR_KEYWORD for p in params):
        hints = "; ".join(f"{k!r}" + "".join(f" (did you mean {c!r}?)" for c in difflib.get_close_matches(
            k, named, n=1, cutoff=0.6)) for k in unnamed)
        warnings.warn(f"benchmark {name!r} takes any option (**kwargs) and names none of these: {hints}. "
                      f"The options it names: {', '.join(named) or 'none'}. Check the spelling.",
                      UserWarning, stacklevel=3)


def _explain_options(entry: Entry, exc: pydantic.ValidationError) -> str:
    model = getattr(sys.modules.get(getattr(entry.factory, "__module__", ""), None), exc.title, None)
    known = list(model.model_fields) if isinstance(model, type) and issubclass(model, pydantic.BaseModel) else []
    said = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else (f"; known options: {', '.join(known)}" if known else "")
            said.append(f"unknown option {key!r}{hint}")
        else:
            said.append(f"option {key!r}: {err['msg']} (got {err.get('input')!r})")
    return "; ".join(said)


def declared_options(factory: Any) -> list[str] | None:
    """The options a factory declares (its named parameters), or None when it takes any (``**options``)
    or its signature cannot be read."""
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def check_benchmark(name: str, options: dict) -> None:
    """The benchmark ``name`` is registered and ``options`` (the config's ``benchmark_options``) are ones its
    factory declares as named parameters, checked without building it: an unknown option is an error with
    the closest known one, before any episode plays. A factory taking ``**options`` accepts any."""
    entry = get("benchmark", name)
    known = declared_options(entry.factory)
    if known is None:
        return
    said = []
    for key in options:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            said.append(f"unknown option {key!r} (benchmark_options.{key})"
                        + (f"; did you mean {close[0]!r}?" if close else ""))
    required = [p.name for p in inspect.signature(entry.factory).parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    said += [f"missing option {key!r} (benchmark_options.{key})" for key in required if key not in options]
    if said:
        raise PluginError(f"benchmark {name!r}: {'; '.join(said)}. Its options: {', '.join(known) or '(none)'}")


def check_options(plugin_options: dict) -> None:
    """``[plugins.NAME]`` tables must name something a loaded plugin registered (a proposer, a trainer,
    ...) or a loaded plugin: options for nothing are a typo, not a no-op."""
    known = {e.name for reg in registries().values() for e in reg.entries.values()}
    known |= {name for name, _ in manager().list_name_plugin()}
    for name in plugin_options:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(k for k in known if ':' not in k and '.' not in k))}"
            raise PluginError(f"options for unknown plugin {name!r} (plugins.{name}); {hint}")


def hook():
    """The hook relay (``hook().on_candidate(...)``); a plugin's ``sys.exit`` inside a hook becomes a
    :class:`PluginError` naming the hook, instead of ending the process without a word."""
    return _Relay(manager().hook)


class _Relay:
    def __init__(self, relay):
        self._relay = relay

    def __getattr__(self, name: str):
        return _Guarded(getattr(self._relay, name), name)


class _Guarded:
    def __init__(self, caller, name: str):
        self._caller, self._name = caller, name

    def __call__(self, *args, **kwargs):
        try:
            return self._caller(*args, **kwargs)
        except SystemExit as exc:
            who = ", ".join(i.plugin_name for i in self._caller.get_hookimpls())
            raise PluginError(f"a plugin called sys.exit({exc.code!r}) in hook {self._name} "
                              f"(implemented by {who}); a plugin must raise an exception instead") from exc

    def __getattr__(self, name: str):
        return getattr(self._caller, name)


def describe() -> list[dict]:
    """One row per plugin: name, package, version, hooks it implements, what it registers (``provides``:
    ``kind:name``) and each registered name's description (``descriptions``)."""
    pm = manager()
    regs = registries()
    dists = {}
    for ep in importlib.metadata.entry_points(group=GROUP):
        dists[ep.name] = (ep.dist.name, ep.dist.version) if ep.dist else ("?", "?")
    rows = []
    for name, plugin in pm.list_name_plugin():
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
        entries = [(kind, e) for kind, reg in regs.items() for e in reg.entries.values() if e.plugin == name]
        provides = [f"{kind}:{e.name}" for kind, e in entries]
        if name in dists:
            package, version = dists[name]
        elif name.startswith("evolver."):
            package, version = "evolver", _version("evolver")
        else:
            package, version = "(local file)", ""
        rows.append({"name": name, "package": package, "version": version, "hooks": hooks,
                     "provides": provides, "descriptions": {f"{kind}:{e.name}": e.description for kind, e in entries}})
    return rows


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "dev"
