"""AgentDojo for evolver: an assistant with tools (email, calendar, files, bookings, a bank account, a Slack
workspace) does what its user asks, and AgentDojo's own utility checks score it. Written against evolver's
public API only, as a third-party benchmark would be; nothing in the core knows it."""
from __future__ import annotations

from evolver import hookimpl

#: The names other plugins may use: none (this plugin offers its hooks, not a library).
__all__: list[str] = []

__version__ = "0.1.0"


@hookimpl
def register_benchmarks(register):
    # benchmark.py imports agentdojo (and the LLM clients it pulls in, ~2 s) only when a benchmark is built
    from evolver_agentdojo.benchmark import AgentDojo

    register("agentdojo", AgentDojo, "AgentDojo's user tasks without prompt injections (suites workspace, travel, "
             "banking, slack; tool-calling preset); options: suites, version, shares, max_steps")
