"""Scripted players for tests that play a benchmark's gold through the evaluator."""
from __future__ import annotations

from evolver.backends.scripted import ScriptedBackend


def gold_player(tasks):
    """A scripted model that plays each task's gold, one action per call, whatever the interleaving."""
    queues = {t.prompt.strip(): list(t.gold) for t in tasks}

    def rule(request):
        opening = next(m.content for m in request.messages if m.role == "user")
        return queues[next(p for p in queues if p in opening)].pop(0)
    return ScriptedBackend(rule=rule)
