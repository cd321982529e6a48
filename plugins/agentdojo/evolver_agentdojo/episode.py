"""One AgentDojo episode: tool calls run against a deep copy of the suite's environment, a plain-text reply is
the final answer, scored by the user task's utility check.

What ``Env.step`` gets (the seed harness's tool-calling preset): a call as JSON text, canonically
``{"name": NAME, "arguments": {...}}`` (``"parameters"`` is read as the arguments too), or any other non-blank
text as the final answer. A blank action (a reply the engine could not finish, recorded as the step's error)
is no answer: the observation says so and the episode goes on. A call runs through AgentDojo's own ``ToolsExecutor`` (its argument fixes, its runtime's
validation) and its result comes back as AgentDojo formats it for a model: YAML for records, the error text
(``Invalid tool X provided.``, ``ValidationError: ...``) when the call is wrong, as its OpenAI client shows it.

Scoring, as AgentDojo's benchmark does it: once, when the agent stops. The final answer is checked by the
task's ``utility_from_traces`` (with the calls made in the episode) where the task defines one, else by
``utility(answer, pre_environment, post_environment)``: 1.0 or 0.0. Reaching the step limit with a call is
AgentDojo's tool loop running out: that call is not run, and the episode is scored as it stands with an empty
answer (a task that only checks the environment can still pass). The running score stays 0 until then, and
no sub-reward is shown before the end: the harness reads every observation, and a running utility or
ground-truth match would tell it, call by call, what the checks want.

Sub-rewards on the final observation (``info["rewards"]``): ``tool_names``, the share of the ground-truth
calls whose function the agent called; ``tool_arguments``, the share it called with the same arguments (both
sides validated by the tool's own parameter model, so defaults and types compare equal). Each call of the
episode matches one ground-truth call at most.
"""
from __future__ import annotations

import json

from evolver import Env, Observation, ToolCalls

OVER = "The task is over: your answer was recorded."
LIMIT = "The step limit is reached: that call was not run, and the task is scored as it stands."
BLANK = "No reply came: call a tool, or answer the user in plain text."


def call_action(name: str, arguments: dict, tools: list[dict]) -> str:
    """A call as the harness sends it to ``Env.step``: ``evolver.ToolCalls.action``'s canonical JSON (the
    name, then the arguments in the tool schema's order: what the local engines' grammar writes, so a
    demonstration trains those very tokens). ``json.loads`` reads any spelling."""
    return ToolCalls.action({"name": name, "arguments": arguments}, tools)


def parse_call(action: str):
    """A call in ``action`` as AgentDojo's FunctionCall, an error text for a call that cannot be one, or
    None when ``action`` is not a call (the final answer)."""
    from agentdojo.functions_runtime import FunctionCall
    from pydantic import ValidationError

    try:
        obj = json.loads(action)
    except (ValueError, TypeError):
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # arguments written as JSON text, as OpenAI's API sends them
        try:
            args = json.loads(args)
        except ValueError:
            pass
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f"ValidationError: the arguments of {obj['name']} must be a JSON object, not {type(args).__name__}"
    try:
        return FunctionCall(function=obj["name"], args=args)
    except ValidationError as exc:
        return f"ValidationError: {exc}"


class AgentDojoEnv(Env):
    """One episode of one user task (see the module docstring). Holds nothing shared: the suite's default
    environment is copied on reset, never played on."""

    def __init__(self, suite, user_task, limit: int):
        self.suite, self.user_task, self.limit = suite, user_task, int(limit)

    def reset(self) -> Observation:
        from agentdojo.functions_runtime import FunctionsRuntime

        self.environment = self.suite.pre_environment(self.user_task)
        self.pre = self.environment.model_copy(deep=True)  # what the checks compare the end against
        self.truth = self.user_task.ground_truth(self.pre.model_copy(deep=True))
        self.runtime = FunctionsRuntime(self.suite.suite.tools)
        self.calls, self.steps, self.final = [], 0, None
        return Observation(text=self.user_task.PROMPT)

    def step(self, action: str) -> Observation:
        if self.final is not None:
            return self.final
        self.steps += 1
        if not str(action or "").strip() and self.steps < self.limit:
            return Observation(text=BLANK, info={"tool": None, "error": True})
        call = parse_call(action)
        if call is None:
            return self._finish(str(action), OVER)
        if self.steps >= self.limit:
            return self._finish("", LIMIT)
        if isinstance(call, str):
            return Observation(text=call, info={"tool": None, "error": True})
        text, error = self._run(call)
        self.calls.append(call)
        return Observation(text=text, info={"tool": call.function, "error": error})

    def _run(self, call) -> tuple[str, bool]:
        """Run ``call`` as AgentDojo's pipeline does; the text a model is shown, and whether it failed."""
        from agentdojo.agent_pipeline.tool_execution import ToolsExecutor
        from agentdojo.types import get_text_content_as_str

        asked = [{"role": "assistant", "content": None, "tool_calls": [call]}]
        try:
            *_, messages, _ = ToolsExecutor().query("", self.runtime, self.environment, asked)
        except Exception as exc:  # what the runtime does not catch itself (a literal it cannot evaluate)
            return f"{type(exc).__name__}: {exc}", True
        result = messages[-1]
        if result.get("error"):
            return result["error"], True
        return get_text_content_as_str(result["content"]), False

    def _finish(self, answer: str, text: str) -> Observation:
        error = None
        try:
            won = self.user_task.utility_from_traces(answer, self.pre, self.environment, self.calls)
            if won is None:
                won = self.user_task.utility(answer, self.pre, self.environment)
        except Exception as exc:  # a check that trips over a state the agent made: the task is not done
            won, error = False, f"{type(exc).__name__}: {exc}"
        won = bool(won)
        info = {"won": won, "rewards": self.rewards(), "calls": len(self.calls)}
        if error:
            info["check_error"] = error
        self.final = Observation(text=text, score=float(won), done=True, info=info)
        return self.final

    def rewards(self) -> dict[str, float]:
        """The shares of the ground-truth calls matched by name, and by name and arguments."""
        if not self.truth:
            return {"tool_names": 1.0, "tool_arguments": 1.0}
        names = [c.function for c in self.calls]
        exact = [self._key(c) for c in self.calls]
        named = matched = 0
        for truth in self.truth:
            if truth.function in names:
                names.remove(truth.function)
                named += 1
            key = self._key(truth)
            if key in exact:
                exact.remove(key)
                matched += 1
        return {"tool_names": named / len(self.truth), "tool_arguments": matched / len(self.truth)}

    def _key(self, call) -> tuple[str, str]:
        function = self.runtime.functions.get(call.function)
        args = dict(call.args)
        if function is not None:
            try:
                args = function.parameters.model_validate(args).model_dump(mode="json")
            except Exception:  # arguments the tool refuses: compared as written
                pass
        return call.function, json.dumps(args, sort_keys=True, default=str)
