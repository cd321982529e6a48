"""The default harness: task + skills -> context -> action.

It is copied into every new program and may be evolved. The interface is documented in
``evolver.harness``. Choices made here, and why:
- When the environment lists valid actions, the model writes an action and the valid action nearest
  to it is played (``WRITE_CHOICE``). Ranking the valid actions by likelihood instead does worse,
  for a small model, base or fine-tuned (docs/measurements.md, ``bench/action_modes.py``); playing
  the written text as it is scores nothing for a base model (``CHOOSE_ACTIONS = False``, still the mode
  for free-text tasks and tools).
- Skills: the system prompt lists every skill's name and description (progressive disclosure, with
  a ``read_skill NAME`` tool in free-text mode); for small models the most relevant bodies are also
  injected, because they cannot be relied on to call a tool.
- An action already taken in the very same state (the room and the inventory where the environment
  reports them, else the observation) is not offered again (``LOOP_GUARD``): in a deterministic game it
  can only lead round the same loop, and a small model otherwise cycles (take X, put X back, take X ...)
  until the step limit. A solution that repeats an action in the same state has a shorter one without
  the repeat.
  When ranking, actions of the last few steps are held back too (unless nothing else is left).
- Only the last few steps are shown in full (a small context keeps small models on track, and context
  tokens are one of the frontier's objectives); older steps leave their actions as one line, and the
  few older observations that told something new (a recipe read, a problem stated) stay as notes,
  since a step that fell out of the window can hold what a later step needs: cookingworld's recipe,
  read at step 3, names the appliance to cook with at step 8 (after SFT with them, cookingworld
  0.66 -> 0.81 on test and 0.64 -> 0.73 on dev, 8 episodes each). The latest observation is shown
  once, apart, as ``Observation:``.
- The window folds ``FOLD`` steps at a time into the earlier actions and notes instead of sliding by
  one, so between folds a step's prompt extends the previous one up to its latest action (the
  backend's prompt cache computes only the rest: that step's observation, the new one and the valid
  actions). A first observation the task text already holds is not repeated. Against the sliding
  window, each after its own cold-start SFT: 0.509 -> 0.562 on 48 test episodes, 0.492 -> 0.522 on
  48 dev, with 17% fewer context tokens on test. Writing every step into one log, the latest
  observation last and unlabelled, would cache a little more, but after SFT it scored 0.427 / 0.459:
  the model took peckingorder's next item without reading the instructions again (0.38 on test).
- ``FOLLOW_NOTES`` (off in the seed): when an observer's note names a valid move (``Next: ACTION.``),
  play it as a choice of one, which the evaluator answers without the model; the prompt is still built
  and stored. A policy that has not learnt to follow a skill's notes is then not in their way; the skill
  miner proposes the switch as a twin of its candidate and the gate decides.
- Presets (the task's ``hints``, see ``evolver.benchmarks.base``): "text-game" as above; "chat" keeps
  the conversation as chat turns and plays the whole reply; "tool-calling" (the default for a task that
  declares tools) adds the task's tools: they are listed in the system prompt and passed with each
  request, so every backend answers with a call that parses (a local engine decodes under the tools'
  grammar). The first reply must be a call (``FIRST_CALL``): a small model otherwise answers in prose
  before it has looked anything up; later replies may be a call or the final answer. A call made again
  with the same arguments is answered by asking for the final answer (``CALL_GUARD``): what it returns is
  in the history already, and a small model otherwise repeats it until the step limit (seen: 16 times). A call is sent to the
  environment as canonical JSON (``evolver.tool_calls.action``). With ``FOLLOW_NOTES``, a note's
  ``Next: {"name": ..., "arguments": {...}}.`` that validates against the task's tools is played when each of
  its argument values is written in the episode so far (``grounded``); otherwise the note names the tool
  (``tool_choice``) and the model writes the arguments under that tool's grammar; a note whose next move is
  a plain reply asks the model for its final answer. The
  task prompt and each observation are budgeted in tokens (a share of the model's context window,
  ``OBS_TOKENS`` at least), never cut silently: text
  over budget ends in a visible marker. Older steps of a text game are compacted on purpose (above).
"""
from __future__ import annotations

import json
import re

from evolver import tool_calls
from evolver.harness import Action, cut_marker
from evolver.types import ChoiceRequest, GenRequest, Message

CHOOSE_ACTIONS = True  # play one of the listed valid actions (False: the action the model writes)
WRITE_CHOICE = True  # choose by writing an action and matching the nearest (False: by likelihood)
INJECT_SKILLS = 2  # bodies injected per episode (0: names and descriptions only)
HISTORY_STEPS = 4  # past (action, observation) pairs shown in full, at least
FOLD = 4  # steps leaving the window together, >= 1 (the window holds HISTORY_STEPS .. HISTORY_STEPS + FOLD - 1)
NOTES = 3  # older observations kept as notes once they leave the window
NOTE_CHARS = 300  # one note's share of the context
LOOP_GUARD = True  # hold back actions already taken in the same state
OBSERVERS = True  # run the scripts skills offer as observers (front matter metadata.observe) after each step
FOLLOW_NOTES = False  # play the move an observer's note names ("Next: ACTION.", a valid action), not the model's
FIRST_CALL = True  # a task with tools: the first reply is a call (tool_choice "required"; later ones "auto")
CALL_GUARD = True  # a call repeated verbatim: the next reply is the final answer (tool_choice "none")
# Budgets in tokens: a share of the executor's context window, never below the floor (a small model's
# window is mostly taken by the rest of the prompt). A task's hint of the same name sets one outright.
OBS_TOKENS = 400  # floor of the task prompt's and one observation's share (hint: observation_tokens)
ACTION_TOKENS = 24  # output budget per free-text action in a text game (hint: reply_tokens)
CHAT_TOKENS = 256  # floor of the output budget per reply in the chat and tool-calling presets (hint: reply_tokens)
TOOLS_TOKENS = 3000  # floor of the tool descriptions' share of the system prompt (hint: tools_tokens)
WINDOW_SHARE = {"observation_tokens": 1 / 32, "tools_tokens": 1 / 8, "actions_tokens": 1 / 32, "reply_tokens": 1 / 64}
CHAT_TURNS = 24  # chat turns kept in full; older ones are dropped with a marker (hint: max_turns)
ACTIONS_TOKENS = 400  # floor of the valid actions' share of a text game's prompt (hint: actions_tokens)
ARGV_CHARS = 100_000  # the valid actions an observer gets as one argument, at most (MAX_ARG_STRLEN is 128 KiB)


class Harness:
    def __init__(self, program):
        self.program = program

    def start(self, task, obs):
        # An observer's body is not injected: what it computes reaches the prompt as its note.
        injected = [k for k in self.program.select_skills(task, INJECT_SKILLS) if not self.observer(k)[0]] \
            if INJECT_SKILLS else []
        state = {"task": task, "history": [], "injected": injected, "tool_notes": [], "tried": set(),
                 "transcript": f"{task.prompt}\n\n{obs.text}", "observed": {}, "first": obs.text,
                 "hints": dict(getattr(task, "hints", None) or {}), "budgeted": {}, "observe_due": True}
        return state

    def run_observers(self, state, actions=None):
        """Skills whose front matter names an ``observe`` script (and ``observe_when``, a pattern the
        transcript must match) get it run on the episode's transcript so far (the task, then each
        action as ``> action`` and what came back) before every model call; its latest output is shown
        as a note. A skill whose front matter sets ``observe_actions: true`` also gets the valid actions
        of this step, as ``--actions JSON`` (a mined skill ranks them by what raised the score in
        similar states). A small model cannot be relied on to call a tool, but it can copy what it is
        shown: a script that sees the whole episode can say what is done and what comes next."""
        state["observe_due"] = False
        if not OBSERVERS:
            return
        text = state["transcript"]
        for skill in self.program.skills:
            script, when = self.observer(skill)
            if not script or (when and not re.search(when, text, re.I)):
                continue
            wants = self.metadata(skill).get("observe_actions")
            listed = list(actions or []) if wants else []
            while len(json.dumps(listed)) > ARGV_CHARS:  # the kernel refuses one argument over 128 KiB
                listed = listed[:len(listed) * 3 // 4]
            args = ["--actions", json.dumps(listed)] if listed else []
            out = self.program.run_skill(skill.name, script, args=args, stdin=text)
            if out:
                state["observed"][skill.name] = f"[{skill.name}] {out[:NOTE_CHARS]}"
            else:
                state["observed"].pop(skill.name, None)  # a note that no longer applies is not shown again

    @staticmethod
    def metadata(skill):
        """The skill's front matter ``metadata`` table ({} without one)."""
        meta = skill.meta.get("metadata")
        return meta if isinstance(meta, dict) else {}

    def observer(self, skill):
        """(script, pattern) of a skill that observes (front matter ``metadata.observe`` and
        ``observe_when``), else (None, None)."""
        meta = self.metadata(skill)
        script, when = meta.get("observe"), meta.get("observe_when")
        return (script if isinstance(script, str) else None), (when if isinstance(when, str) else None)

    def hint(self, state, name, default):
        value = state["hints"].get(name)
        return default if value is None else value

    def tokens(self, state, name, floor):
        """The budget ``name``: the task's hint, else its share of the context window, at least ``floor``."""
        value = state["hints"].get(name)
        if value is not None:
            return int(value)
        window = int(getattr(self.program, "context_window", 0) or 0)
        return max(int(floor), int(window * WINDOW_SHARE.get(name, 0)))

    def budget(self, state, text, tokens=None):
        """``text`` within ``tokens`` tokens of the executor's tokenizer (default: the observation budget);
        over it, cut with a visible marker that says how much is missing. Remembered per text."""
        tokens = tokens or self.tokens(state, "observation_tokens", OBS_TOKENS)
        key = (text, tokens)
        if key not in state["budgeted"]:
            state["budgeted"][key] = self._cut(text, tokens)
        return state["budgeted"][key]

    def _cut(self, text, tokens):
        if len(text) <= tokens:  # a token is at least one character
            return text
        n = self.program.count_tokens(text)
        if n <= tokens:
            return text
        keep = max(0, len(text) * tokens // n)
        while keep and self.program.count_tokens(text[:keep]) > tokens:
            keep = keep * 9 // 10
        return f"{text[:keep]} {cut_marker(n - self.program.count_tokens(text[:keep]))}"

    def system_prompt(self, state) -> str:
        parts = [self.program.prompt.strip()]
        # An observer is not a skill the model calls: its notes speak for it (and run when OBSERVERS is on).
        skills = [s for s in self.program.skills if not (OBSERVERS and self.observer(s)[0])]
        if skills:
            index = "\n".join(f"- {s.name}: {s.description}" for s in skills)
            parts.append("Skills you have (use `read_skill NAME` to read one):\n" + index)
        for skill in state["injected"]:
            parts.append(f"## Skill: {skill.name}\n{skill.body.strip()}")
        tools = state["task"].tools if self.preset(state) == "tool-calling" else None
        if tools:
            parts.append(self.budget(state, self.tool_list(tools), self.tokens(state, "tools_tokens", TOOLS_TOKENS)))
        return "\n\n".join(p for p in parts if p)

    def preset(self, state):
        return self.hint(state, "preset", "tool-calling" if state["task"].tools else "text-game")

    @staticmethod
    def tool_list(tools):
        """The task's tools as the prompt describes them, and how to call one."""
        lines = ['Tools you can call. To call one, reply with only a JSON object: {"name": "TOOL", "arguments": {...}}.']
        for tool in tools:
            fn = tool.get("function", tool) if isinstance(tool, dict) else {}
            params = (fn.get("parameters") or {}).get("properties") or {}
            lines.append(f"- {fn.get('name', '?')}({', '.join(params)}): {fn.get('description', '')}".rstrip(": "))
        return "\n".join(lines)

    def user_prompt(self, state, obs, actions=None) -> str:
        task = self.budget(state, state["task"].prompt.strip())
        lines = [f"Task: {task}"]
        history = state["history"]
        # The window starts at a multiple of FOLD: it moves only every FOLD steps, so until then each
        # prompt is the previous one plus a step (what the backend's prompt cache can reuse).
        start = max(0, (len(history) - HISTORY_STEPS) // FOLD * FOLD)
        older, recent = history[:start], history[start:]
        notes = self.notes(state["task"].prompt, older)
        if notes:
            lines.append("Notes from earlier steps:\n" + "\n".join(f"- {a}: {o}" for a, o in notes))
        if older:
            lines.append("Earlier actions: " + ", ".join(a for a, _ in older))
        if recent:
            # The latest step's result is the observation below: shown once, not twice.
            shown = [f"> {a}\n{o[:300]}" for a, o in recent[:-1]] + [f"> {recent[-1][0]}"]
            lines.append("Recent steps:\n" + "\n".join(shown))
        lines += state["tool_notes"][-2:] + list(state["observed"].values())
        text = self.budget(state, obs.text.strip())
        if history or text not in task:  # (a first observation the task text holds is not repeated)
            lines.append(f"Observation: {text}")
        actions = obs.actions if actions is None else actions
        if actions:
            lines.append("Valid actions: " + self.listed_actions(state, actions))
        lines.append("Next action:")
        return "\n\n".join(lines)

    def listed_actions(self, state, actions):
        """The valid actions as the prompt lists them: all while they fit ``ACTIONS_TOKENS``; past it, a
        share of each command (an action's first word), those sharing most words with the task and the
        observers' notes first, shown in the environment's order, and a marker. The model may still write
        an action that is not listed: the nearest valid action is played."""
        budget = self.tokens(state, "actions_tokens", ACTIONS_TOKENS)
        text = ", ".join(actions)
        tokens = len(text) if len(text) <= budget else self.program.count_tokens(text)  # one count: a round trip
        if tokens <= budget:
            return text
        chars = budget * len(text) // max(1, tokens)
        context = set(re.findall(r"[a-z0-9]+", (state["task"].prompt + " " + " ".join(state["observed"].values())).lower()))
        commands = {}
        for i, action in enumerate(actions):
            words = re.findall(r"[a-z0-9]+", action.lower())
            commands.setdefault(words[0] if words else "", []).append((-len(set(words) & context), i))
        queues = sorted((sorted(q) for q in commands.values()), key=lambda q: q[0])
        keep, used = set(), 0
        while any(queues) and used <= chars:
            for q in queues:  # one of each command in turn, the most relevant command first
                if q and used + len(actions[q[0][1]]) + 2 <= chars:
                    i = q.pop(0)[1]
                    keep.add(i)
                    used += len(actions[i]) + 2
                elif q:
                    q.clear()  # no room left for this command's next one
        shown = [a for i, a in enumerate(actions) if i in keep]
        return ", ".join(shown) + f" [... {len(actions) - len(shown)} more valid actions not listed]"

    @staticmethod
    def notes(task_text, older):
        """The first older observations that said something new: mostly words the task text (which
        holds the first room description) does not have, and not a short confirmation."""
        known = set(re.findall(r"[a-z0-9']+", task_text.lower()))
        out, seen = [], set()
        for action, text in older:
            words = re.findall(r"[a-z0-9']+", text.lower())
            novel = sum(w not in known for w in words)
            key = " ".join(words)
            if len(words) >= 8 and novel >= len(words) / 2 and key not in seen:
                seen.add(key)
                out.append((action, " ".join(text.split())[:NOTE_CHARS]))
            if len(out) == NOTES:
                break
        return out

    @staticmethod
    def state_key(obs):
        """The environment's state as far as it reports it (its ``look`` and ``inventory`` info), else the
        observation. Not the observation beside them: "You close the drawer." after opening it is the
        state before, and so is a cycle through several places."""
        info = obs.info or {}
        facts = tuple(str(info[k]) for k in ("look", "inventory") if k in info)
        return facts or (obs.text,)

    def chat_messages(self, state):
        """The chat presets' context: the task (and a first observation it does not hold) as the first
        user turn, then each action as an assistant turn and what came back as the next user turn; the
        oldest turns give way first, with a marker, beyond ``CHAT_TURNS``."""
        task = self.budget(state, state["task"].prompt.strip())
        first = self.budget(state, (state["first"] or "").strip())
        opening = task if not first or first in task else f"{task}\n\n{first}"
        turns = []
        for action, text in state["history"]:
            turns += [Message("assistant", action), Message("user", self.budget(state, text.strip()) or "(no reply)")]
        keep = max(2, int(self.hint(state, "max_turns", CHAT_TURNS)) // 2 * 2)
        if len(turns) > keep:
            opening += f"\n\n[{(len(turns) - keep) // 2} earlier exchanges omitted]"
            turns = turns[-keep:]
        notes = state["tool_notes"][-2:] + list(state["observed"].values())
        if notes:
            last = turns[-1] if turns and turns[-1].role == "user" else None
            extra = "\n\n".join(notes)
            if last:
                turns[-1] = Message("user", f"{last.content}\n\n{extra}")
            else:
                opening = f"{opening}\n\n{extra}"
        return [Message("system", self.system_prompt(state)), Message("user", opening), *turns]

    def next_call(self, state, obs):
        if obs.done:
            return None
        if self.preset(state) in ("chat", "tool-calling"):
            if state.get("observe_due"):  # after each step, once its valid actions are known
                self.run_observers(state, obs.actions)
            tools = (state["task"].tools if self.preset(state) == "tool-calling" else None) or None
            messages = self.chat_messages(state)
            call = self.noted_call(state, tools) if tools and FOLLOW_NOTES else None
            made = [a for a, _ in state["history"]]
            if call and self.grounded(call, state) and tool_calls.action(call, tools) not in made:
                # a choice of one is answered without the model (a call already made is the guard's below)
                return ChoiceRequest(messages=messages, options=[tool_calls.action(call, tools)], write=WRITE_CHOICE)
            first = FIRST_CALL and not state["history"]
            choice = "required" if tools and first else self.hint(state, "tool_choice", None)
            if call:  # its values come from another episode: the note names the tool, the model writes the arguments
                choice = call["name"]
            elif tools and FOLLOW_NOTES and self.noted_answer(state):
                choice = "none"  # the note's next move is a plain reply: the final answer, in the model's words
            if CALL_GUARD and tools and made and made[-1].startswith("{") and made[-1] in made[:-1]:
                choice = "none"  # the same call again: what it returns is in the history; now the answer
            return GenRequest(messages=messages, tools=tools, tool_choice=choice if tools else None,
                              max_tokens=self.tokens(state, "reply_tokens", CHAT_TOKENS))
        options = list(obs.actions or [])
        if obs.actions and CHOOSE_ACTIONS:
            key = self.state_key(obs)
            held = {a for a in obs.actions if (key, a) in state["tried"]} if LOOP_GUARD else set()
            if not WRITE_CHOICE:  # a written action is the model's own; a ranked one needs this guard too
                held |= {a for a, _ in state["history"][-HISTORY_STEPS:]}
            options = [a for a in obs.actions if a not in held] or options
        if state.get("observe_due"):  # after each step, with the actions this step offers
            self.run_observers(state, options)
        messages = [Message("system", self.system_prompt(state)),
                    Message("user", self.user_prompt(state, obs, options))]
        if obs.actions and CHOOSE_ACTIONS:
            move = self.noted_move(state, options) if FOLLOW_NOTES else None
            # A choice of one is answered without the model; the context still goes to the trace.
            return ChoiceRequest(messages=messages, options=[move] if move else options, write=WRITE_CHOICE)
        return GenRequest(messages=messages, max_tokens=int(self.hint(state, "reply_tokens", ACTION_TOKENS)), stop=["\n"])

    def noted_move(self, state, options):
        """The move an observer's latest note names on a line ``Next: ACTION.`` when it is one of
        ``options`` (the first such note, in the program's skill order), else None."""
        return next((m for m in self.named_moves(state) if m in options), None)

    @staticmethod
    def named_moves(state):
        """The moves the observers' latest notes name, each on a line ``Next: MOVE.``, in the program's
        skill order."""
        for note in state["observed"].values():
            for line in note.splitlines():
                found = re.search(r"\bNext: (.+?)\.?\s*$", line)
                if found:
                    yield found.group(1).strip()

    def noted_call(self, state, tools):
        """The first valid call of ``tools`` the observers' notes name on a line ``Next: {"name": ...,
        "arguments": {...}}.`` (in the program's skill order), else None."""
        for move in self.named_moves(state):
            call = tool_calls.parse(move) if move.startswith("{") else None
            if call and tool_calls.validate(call, tools) is None:
                return call
        return None

    def noted_answer(self, state):
        """Whether the first ``Next:`` line of the observers' notes names a plain reply (not a call)."""
        first = next(self.named_moves(state), None)
        return first is not None and not first.startswith("{")

    @staticmethod
    def grounded(call, state):
        """Whether every value in the call's arguments is written in the episode so far (the task and
        what came back): a mined call copies its values from the episode it was mined from, and one this
        episode never mentions belongs to that episode, not to this one."""
        text = state["transcript"].lower()
        values, todo = [], [call.get("arguments")]
        while todo:
            v = todo.pop()
            if isinstance(v, dict):
                todo += list(v.values())
            elif isinstance(v, list):
                todo += v
            elif isinstance(v, (str, int, float)) and not isinstance(v, bool):
                values.append(str(v).lower())
        return all(v in text for v in values if v.strip())

    def parse(self, state, obs, request, result):
        if isinstance(request, ChoiceRequest):
            if 0 <= result.index < len(request.options):
                choice = request.options[result.index]
                state["tried"].add((self.state_key(obs), choice))
                return Action(env_action=choice, output=choice)
            return Action(env_action="", output="")
        text = (result.text or "").strip()
        if getattr(request, "tool_choice", None) == "none" and request.tools:
            return Action(env_action=text, output=text)  # the final answer was asked for: no call is read from it
        if self.preset(state) in ("chat", "tool-calling"):
            return self.parse_reply(state, obs, result, text)
        first = text.splitlines()[0].strip() if text else ""
        words = first.split()
        if words[:1] == ["read_skill"] and len(words) >= 2:
            return Action(tool="read_skill", args=words[1:2], output=text)
        if words[:1] == ["run_skill"] and len(words) >= 3:
            return Action(tool="run_skill", args=words[1:], output=text)
        action = first.removeprefix("Action:").strip()
        state["tried"].add((self.state_key(obs), action))
        return Action(env_action=action, output=text)

    def parse_reply(self, state, obs, result, text):
        """A chat reply: a skill tool (``read_skill`` / ``run_skill`` on its first line), a call of one of
        the task's tools (native, else the first JSON object with a "name"), sent to the env as JSON
        text, or else the whole reply."""
        words = text.split("\n", 1)[0].split()
        if words[:1] == ["read_skill"] and len(words) >= 2:
            return Action(tool="read_skill", args=words[1:2], output=text)
        if words[:1] == ["run_skill"] and len(words) >= 3:
            return Action(tool="run_skill", args=words[1:], output=text)
        if self.preset(state) != "tool-calling":
            return Action(env_action=text, output=text)
        native = getattr(result, "tool_calls", None)  # [] from an engine that decoded a final message
        calls = [c for c in native or [] if isinstance(c, dict) and isinstance(c.get("name"), str)]
        call = calls[0] if calls else (tool_calls.parse(text) if native is None else None)
        if call:
            action = tool_calls.action(call, state["task"].tools)
            return Action(env_action=action, output=text or action)
        return Action(env_action=text, output=text)

    def observe(self, state, action, text):
        if action.tool:
            state["tool_notes"].append(f"[{action.tool} {' '.join(action.args)}]\n{self.budget(state, text)}")
        else:
            state["history"].append((action.env_action or "", text))
            state["transcript"] += f"\n> {action.env_action or ''}\n{text}"
            state["observe_due"] = True
