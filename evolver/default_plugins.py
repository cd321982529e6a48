"""Built-in benchmarks, backends, selectors, the default harness and the live display's scoreboard, registered
through the same hooks a third-party plugin uses. Factories import lazily so ``evolver --help`` stays fast.

Only what needs nothing beyond the core's dependencies is built in: the ``basic`` benchmark and the
``openai`` and ``scripted`` backends. The engines and the benchmarks of the default run are first-party
plugins under ``plugins/``, and so is the profile that names them."""
from __future__ import annotations

from evolver.hookspecs import hookimpl


def _lazy(module: str, attr: str):
    def factory(**options):
        import importlib

        return getattr(importlib.import_module(module), attr)(**options)
    factory.__qualname__ = f"{module}.{attr}"
    return factory


def basic_benchmark(categories: list[str] | None = None):
    """The ``basic`` benchmark; its options are these parameters (checked before a run, see
    ``evolver.plugins.check_benchmark``), the same as :class:`evolver.benchmarks.basic.BasicBenchmark`'s."""
    from evolver.benchmarks.basic import BasicBenchmark

    return BasicBenchmark(categories=categories)


@hookimpl
def register_benchmarks(register):
    register("basic", basic_benchmark,
             "zero-dependency fallback: arithmetic, unit conversion, 2-4 hop knowledge-base tool use")


@hookimpl
def register_backends(register):
    register("openai", _lazy("evolver.backends.openai_backend", "OpenAIBackend"),
             "any OpenAI-compatible chat-completions server")
    register("scripted", _lazy("evolver.backends.scripted", "ScriptedBackend"),
             "queued answers or a rule; for tests and deterministic demos")
    register("auto", _lazy("evolver.backends.auto", "auto_backend"),
             "the default: vllm where its plugin and a GPU are, else the embedded transformers engine")


@hookimpl
def register_clusters(register):
    register("ray", _lazy("evolver.ray_cluster", "ray_cluster"),
             "Ray actors play episodes across processes, GPUs and machines (pip install -e '.[ray]')")


@hookimpl
def register_selectors(register):
    from evolver.frontier import SELECTORS

    descriptions = {"round-robin": "cycle through frontier members (default)", "best": "always the best member",
                    "random": "a seeded random member", "ucb": "UCB1 over members' scores and visits"}
    for name, factory in SELECTORS.items():
        register(name, factory, descriptions[name])


@hookimpl
def register_harnesses(register):
    from evolver.harness import SEED_DIR

    register("default", SEED_DIR / "harness" / "harness.py",
             "writes an action, plays the nearest valid one; skills indexed and the top ones injected")


@hookimpl
def on_candidate(run, candidate, outcome):
    """The live display's scoreboard (evolver.live_status.LiveStatus) shows each candidate's dev score as it lands."""
    ui = getattr(run, "ui", None)
    if ui is not None and hasattr(ui, "on_candidate"):
        ui.on_candidate(run, candidate, outcome)
