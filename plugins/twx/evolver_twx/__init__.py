"""TextWorldExpress for evolver: the ``twx`` benchmark (suites twx-easy and twx-hard), and the ``default``
profile that makes it the default run's (``default.toml``: the configuration ``evolver init`` writes).

Text games played through a few shared JVMs (:mod:`evolver_twx.benchmark`). Its seed program carries no
twx knowledge. The opt-in pack ``twx-experts`` (``packs/twx-experts``: ``arithmetic-word-problems``,
``quantity-order``, ``usual-place``, ``recipe-steps``) holds solvers written by hand for twx, marked
``metadata.hand_written``; ``--set seed_skills=twx-experts`` seeds with all four, a skill's own name with
one. :mod:`evolver_twx.places` rebuilds ``usual-place``'s table from the train fold.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from evolver import hookimpl, make_plugin

#: The names other plugins may use: none (this plugin offers its hooks, not a library).
__all__: list[str] = []

__version__ = "0.1.0"


PROFILE = Path(__file__).with_name("default.toml")


@hookimpl
def register_profiles(register):
    register("default", PROFILE.read_text, "twx-easy, the embedded model in every role, the skill miner: the "
             "default run (evolver init writes it)")
    register("twx-easy", PROFILE.read_text, "the same as 'default'")


@hookimpl
def register_benchmarks(register):
    register("twx", twx_benchmark, "TextWorldExpress text games (suites twx-easy, twx-hard); needs Java 17")


def twx_benchmark(suite: str = "twx-easy", games: list[str] | str | None = None, max_steps: int | None = None,
                  jvm_pool: int = 2):
    """A :class:`evolver_twx.benchmark.TwxBenchmark` (its options are these parameters, declared here so
    ``benchmark_options`` are checked before a run without importing it). TextWorldExpress runs in a JVM;
    without Java the core's zero-dependency ``basic`` benchmark stands in, said loudly, so the default run
    still runs."""
    if shutil.which("java") is None:
        print("evolver: Java not found, so twx cannot run; using the built-in 'basic' benchmark "
              "instead (install openjdk-17-jre-headless for twx)", file=sys.stderr)
        return make_plugin("benchmark", "basic")
    from evolver_twx.benchmark import TwxBenchmark

    return TwxBenchmark(suite=suite, games=games, max_steps=max_steps, jvm_pool=jvm_pool)
