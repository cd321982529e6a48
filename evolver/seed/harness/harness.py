"""The default harness: task + skills -> context -> action.

It is copied into every new program and may be evolved. The interface is documented in
``evolver.harness``. Choices made here, and why:
- When the environment lists valid actions, the model writes an action and the valid action nearest
  to it is played (``WRITE_CHOICE``). Ranking the valid actions by likelihood instead does worse,
  both for the base 135M model (0.013 vs 0.118 on 60 twx-easy dev episodes; a random agent is
  ~0.07) and after cold-start SFT (0.29 vs 0.44 on 24); playing the written text as it is scores 0.0
  for the base model (``CHOOSE_ACTIONS = False``, still the mode for free-text tasks and tools).
- Skills: the system prompt lists every skill's name and description (progressive disclosure, with
  a ``read_skill NAME`` tool in free-text mode); for small models the most relevant bodies are also
  injected, because they cannot be relied on to call a tool.
- Actions taken in the last few steps are not offered again for ranking (unless nothing else is
  left): a small model otherwise repeats its favourite action until the step limit. A written
  action is not held back: a trained model that repeats one means it (some games need repeats).
- Only the last few steps of history are shown: a small context keeps small models on track and
  context tokens are one of the frontier's objectives.
"""
from __future__ import annotations

from evolver.harness import Action
from evolver.types import ChoiceRequest, GenRequest, Message

CHOOSE_ACTIONS = True  # play one of the listed valid actions (False: the action the model writes)
WRITE_CHOICE = True  # choose by writing an action and matching the nearest (False: by likelihood)
INJECT_SKILLS = 2  # bodies injected per episode (0: names and descriptions only)
HISTORY_STEPS = 4  # past (action, observation) pairs shown
MAX_OBS_CHARS = 1200  # one observation's share of the context
ACTION_TOKENS = 24  # output budget per free-text action


class Harness:
    def __init__(self, program):
        self.program = program

    def start(self, task, obs):
        injected = self.program.select_skills(task, INJECT_SKILLS) if INJECT_SKILLS else []
        return {"task": task, "history": [], "injected": injected, "tool_notes": []}

    def system_prompt(self, state) -> str:
        parts = [self.program.prompt.strip()]
        skills = self.program.skills
        if skills:
            index = "\n".join(f"- {s.name}: {s.description}" for s in skills)
            parts.append("Skills you have (use `read_skill NAME` to read one):\n" + index)
        for skill in state["injected"]:
            parts.append(f"## Skill: {skill.name}\n{skill.body.strip()}")
        return "\n\n".join(p for p in parts if p)

    def user_prompt(self, state, obs) -> str:
        lines = [f"Task: {state['task'].prompt.strip()[:MAX_OBS_CHARS]}"]
        recent = state["history"][-HISTORY_STEPS:]
        if recent:
            lines.append("Recent steps:\n" + "\n".join(f"> {a}\n{o[:300]}" for a, o in recent))
        lines += state["tool_notes"][-2:]
        lines.append(f"Observation: {obs.text.strip()[:MAX_OBS_CHARS]}")
        if obs.actions:
            lines.append("Valid actions: " + ", ".join(obs.actions))
        lines.append("Next action:")
        return "\n\n".join(lines)

    def next_call(self, state, obs):
        if obs.done:
            return None
        messages = [Message("system", self.system_prompt(state)), Message("user", self.user_prompt(state, obs))]
        if obs.actions and CHOOSE_ACTIONS:
            # A written action is the model's own; only ranking needs the guard against repeats.
            recent = set() if WRITE_CHOICE else {a for a, _ in state["history"][-HISTORY_STEPS:]}
            options = [a for a in obs.actions if a not in recent] or list(obs.actions)
            return ChoiceRequest(messages=messages, options=options, write=WRITE_CHOICE)
        return GenRequest(messages=messages, max_tokens=ACTION_TOKENS, stop=["\n"])

    def parse(self, state, obs, request, result):
        if isinstance(request, ChoiceRequest):
            if 0 <= result.index < len(request.options):
                choice = request.options[result.index]
                return Action(env_action=choice, output=choice)
            return Action(env_action="", output="")
        text = (result.text or "").strip()
        first = text.splitlines()[0].strip() if text else ""
        words = first.split()
        if words[:1] == ["read_skill"] and len(words) >= 2:
            return Action(tool="read_skill", args=words[1:2], output=text)
        if words[:1] == ["run_skill"] and len(words) >= 3:
            return Action(tool="run_skill", args=words[1:], output=text)
        return Action(env_action=first.removeprefix("Action:").strip(), output=text)

    def observe(self, state, action, text):
        if action.tool:
            state["tool_notes"].append(f"[{action.tool} {' '.join(action.args)}]\n{text[:MAX_OBS_CHARS]}")
        else:
            state["history"].append((action.env_action or "", text))
