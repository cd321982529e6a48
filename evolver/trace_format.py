"""Rendering one episode's trace for people (`evolver traces --episode ID`)."""
from __future__ import annotations

import json

from evolver.store_schema import dumps
from evolver.types import Episode


def _tail(text: str | None, n: int) -> str:
    text = text or ""
    return text if len(text) <= n else "..." + text[-n:]


def _prompt_tail(prompt: str, n: int = 600) -> str:
    """The end of the context: the last chat message when the prompt is JSON messages."""
    try:
        msgs = json.loads(prompt)
        if isinstance(msgs, list) and msgs and isinstance(msgs[-1], dict) and "content" in msgs[-1]:
            return f"({len(msgs)} messages, last [{msgs[-1].get('role', '?')}]) {_tail(str(msgs[-1]['content']), n)}"
    except (ValueError, TypeError):
        pass
    return _tail(prompt, n)


def _indent(text: str, pad: str = "      ") -> str:
    return ("\n" + pad).join((text or "").splitlines() or [""])


def task_label(task) -> str:
    """``benchmark/id``, or just the id when it already starts with the benchmark's name (``basic/units/dev/0``)."""
    return task.id if not task.benchmark or task.id.startswith(f"{task.benchmark}/") else f"{task.benchmark}/{task.id}"


def format_episode(episode: Episode) -> str:
    """A readable multi-line trace of one episode, for `evolver traces --episode ID`."""
    e, t = episode, episode.task
    # An episode fresh from the harness may not have been tally()'d yet.
    ptok = e.prompt_tokens or sum(s.prompt_tokens or 0 for s in e.steps)
    ctok = e.completion_tokens or sum(s.completion_tokens or 0 for s in e.steps)
    out = [f"episode {e.id}  run {e.run_id or '-'}  purpose {e.purpose}",
           f"program {e.program_id} (hash {e.program_hash})  model {e.model}  seed {e.seed}",
           f"task    {task_label(t)}  split {t.split}  category {t.category}  task seed {t.seed}",
           f"score   {e.score:.3f}  won {e.won}  steps {len(e.steps)}  tokens {ptok} prompt + "
           f"{ctok} completion  wall {e.wall_s:.2f}s (model {e.model_s:.2f}s)"]
    if e.rewards:
        out.append("rewards " + ", ".join(f"{k}={v}" for k, v in e.rewards.items()))
    if e.error:
        out.append(f"ERROR   {_indent(e.error, '        ')}")
    if t.prompt:
        out.append(f"task prompt:\n      {_indent(_tail(t.prompt, 1500))}")
    for s in e.steps:
        out.append(f"--- step {s.index}  reward {s.reward:.3f}  tokens {s.prompt_tokens}+{s.completion_tokens}  "
                   f"{s.latency_s:.2f}s")
        out.append(f"  prompt (tail): {_indent(_prompt_tail(s.prompt))}")
        out.append(f"  output:        {_indent(s.output)}")
        out.append(f"  action:        {s.action!r}")
        out.append(f"  observation:   {_indent(_tail(s.observation, 1500))}")
        for call in s.tool_calls:
            out.append(f"  tool call:     {dumps(call)}")
        if s.error:
            out.append(f"  error:         {_indent(s.error)}")
    out.append(f"prediction: {e.prediction!r}")
    out.append(f"gold:       {dumps(t.gold)}")
    return "\n".join(out)


def brief_step(step, obs_chars: int = 160) -> str:
    """One step on one line, for proposers' prompts: the action (or tool call) and the start of its answer."""
    seen = (step.observation or "").strip()[:obs_chars]
    if step.tool_calls:
        call = step.tool_calls[0]
        return f"  [tool {call.get('tool')} {' '.join(call.get('args', []))}] -> {seen}"
    return f"  > {step.action or '(no action)'}  -> {seen}"


def gold_text(gold) -> str:
    """A gold answer as one line (action sequences joined with ' | ')."""
    return " | ".join(map(str, gold)) if isinstance(gold, (list, tuple)) else str(gold)


class Traces:
    """What proposers show a model of the store's episodes (a namespace: use ``Traces.episode(ep)``, never
    an instance)."""

    episode = staticmethod(format_episode)
    step = staticmethod(brief_step)
    gold = staticmethod(gold_text)
