"""TextWorldExpress for evolver: the ``twx`` benchmark, the default (suites twx-easy and twx-hard).

Text games played through a few shared JVMs (:mod:`evolver_twx.benchmark`). Its seed skills,
``arithmetic-word-problems`` and ``quantity-order``, ship with evolver and are found by name
(``evolver.shipped_skill``).
"""
from __future__ import annotations

import shutil
import sys

from evolver import hookimpl, make_plugin

__version__ = "0.1.0"


@hookimpl
def register_benchmarks(register):
    register("twx", twx_benchmark, "TextWorldExpress text games (suites twx-easy, twx-hard); needs Java 17")


def twx_benchmark(**options):
    """A :class:`evolver_twx.benchmark.TwxBenchmark`. TextWorldExpress runs in a JVM; without Java the
    core's zero-dependency ``basic`` benchmark stands in, said loudly, so the default run still runs."""
    if shutil.which("java") is None:
        print("evolver: Java not found, so twx cannot run; using the built-in 'basic' benchmark "
              "instead (install openjdk-17-jre-headless for twx)", file=sys.stderr)
        return make_plugin("benchmark", "basic")
    from evolver_twx.benchmark import TwxBenchmark

    return TwxBenchmark(**options)
