"""A candidate's harness run in a sandboxed subprocess, behind a proxy with the harness interface.

Candidate harness code is untrusted: it may loop forever, exhaust memory, open sockets or write files. Every
stage that plays a program with a run (``evolver.evaluate.evaluate_many``: rollouts, smoke, dev, test,
trainers, verifiers) therefore runs it here: :class:`SandboxedHarness` is what the evaluator drives, and it forwards ``start / next_call / parse / observe`` as JSON lines to a
child process that imported the candidate's ``harness/harness.py`` under :mod:`evolver.sandbox` (memory
and process limits, no network, a read-only view of its own program folder, the interpreter and the
``evolver`` package only: not the workspace, its store or the benchmark's code). The environment and the
model stay in the evaluator, so the child never holds the backend, the benchmark or a task's gold answer;
the harness's per-episode state stays in the child and the evaluator only sees a handle for it.

What the harness asks of its :class:`~evolver.harness.ProgramContext` (``select_skills``,
``count_tokens``, ``run_skill``) is answered by the evaluator while the call is in progress, so skill selection goes
through the same ``select_skills`` hook as in-process episodes.

Failures, each one episode's error, never the run's:
- an exception in a harness method comes back with the child's traceback (:class:`RemoteHarnessError`);
- a call that runs longer than ``evolver.lockstep.HARNESS_CALL_S`` kills the child (``HarnessTimeout``);
- a child that dies (memory limit, ``os._exit``) raises with the tail of its stderr.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import sys
import time
import traceback
from typing import Any

from evolver.errors import EvolverError
from evolver.harness import (HARNESS_INTERFACE, SEED_DIR, Action, ProgramContext, make_harness, program_context,
                             task_for_harness)
from evolver.types import (ChoiceRequest, ChoiceResult, GenRequest, GenResult, Message, Observation,
                           Program, Task)

START_S = 30.0  # importing the harness and building it: the import check already allowed this much


class RemoteHarnessError(EvolverError):
    """An exception raised inside the sandboxed harness. ``repr`` is the child's one-line ``repr`` of it;
    ``str`` holds the child's full traceback, so the evaluator's traceback of this error ends with it."""

    def __init__(self, summary: str, remote_traceback: str = ""):
        super().__init__(f"{summary}\n{remote_traceback}".strip())
        self.summary, self.remote_traceback = summary, remote_traceback

    def __repr__(self) -> str:
        return f"{self.summary} (in the sandboxed harness)"


# -- encoding what crosses the pipe ----------------------------------------------------------------------

def _plain(obj: Any) -> Any:
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj


def _build(cls, data: dict):
    """``cls(**data)`` keeping only the fields ``cls`` has (either side may be a newer version)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def encode_request(req) -> dict | None:
    if req is None:
        return None
    kind = "choice" if isinstance(req, ChoiceRequest) else "gen"
    return {"kind": kind, **_plain(req)}


def decode_request(data: dict | None):
    if data is None:
        return None
    messages = [_build(Message, m) for m in data.get("messages", [])]
    cls = ChoiceRequest if data.get("kind") == "choice" else GenRequest
    return _build(cls, {**data, "messages": messages})


def encode_result(res) -> dict:
    return {"kind": "choice" if isinstance(res, ChoiceResult) else "gen", **_plain(res)}


def decode_result(data: dict):
    if data.get("kind") == "choice":
        sample = data.get("sample")
        return _build(ChoiceResult, {**data, "sample": _build(GenResult, sample) if isinstance(sample, dict) else None})
    return _build(GenResult, data)


# -- the evaluator's side --------------------------------------------------------------------------------

class SandboxedHarness:
    """The harness interface, implemented by talking to a sandboxed child process (see the module doc)."""

    def __init__(self, ctx: ProgramContext, memory_mb: int = 2048, mechanism: str | None = None, packages=()):
        """``packages``: installed distributions the harness may import beyond the standard library and the
        harness API (the benchmark's ``harness_packages``)."""
        from evolver.sandbox import open_python
        from evolver.sandbox_view import UnknownPackage

        self.ctx = ctx
        self._dead = ""
        self._buffer = b""
        program = json.dumps(dataclasses.asdict(ctx.program), default=str)
        code = f"from evolver.harness_sandbox import serve; serve({program!r}, {int(ctx.context_window)})"
        # It sees its own program (harness code, prompt, skills) read-only, and none of the workspace.
        try:
            self.session = open_python(code, memory_mb=memory_mb, mechanism=mechanism, visible=[ctx.program.root],
                                       trusted_packages=tuple(packages))
        except UnknownPackage as exc:
            raise EvolverError(f"the benchmark's harness_packages: {exc}") from None
        try:
            self._answer(time.monotonic() + START_S, "starting the harness")
        except BaseException:  # a harness that cannot start is never handed out, so never closed by its caller
            self._dead = "it did not start"
            self.session.close()
            raise

    # The interface the evaluator drives.
    def start(self, task: Task, obs: Observation):
        # The caller hands over task_for_harness(task); the gold answer is dropped again, whoever called.
        return self._call("start", task=_plain(dataclasses.replace(task, gold=None)), obs=_plain(obs))

    def next_call(self, state, obs: Observation):
        return decode_request(self._call("next_call", state=state, obs=_plain(obs)))

    def parse(self, state, obs: Observation, request, result) -> Action:
        return _build(Action, self._call("parse", state=state, obs=_plain(obs), result=encode_result(result)))

    def observe(self, state, action: Action, text: str) -> None:
        self._call("observe", state=state, action=_plain(action), text=text)

    def close(self) -> None:
        self.session.close()

    # The conversation.
    def _call(self, op: str, **args) -> Any:
        from evolver import lockstep  # the evaluator's side only: the sandbox's view holds no lockstep

        if self._dead:
            raise RemoteHarnessError(f"the sandboxed harness is no longer running: {self._dead}")
        seconds = lockstep.HARNESS_CALL_S
        try:
            self._send({"op": op, **args})
            return self._answer(time.monotonic() + seconds, f"harness.{op}", seconds)
        except BaseException as exc:  # a timeout (ours or the evaluator's SIGALRM) leaves the child mid-call
            if not self._dead:
                self._dead = repr(exc)
                self.session.close()
            if isinstance(exc, lockstep.HarnessTimeout) and "sandboxed" not in str(exc):
                raise lockstep.HarnessTimeout(f"{exc} (harness.{op}, sandboxed)") from None
            raise

    def _answer(self, deadline: float, what: str, seconds: float = START_S) -> Any:
        while True:
            message = self._receive(deadline, what, seconds)
            if "call" in message:  # the harness asks its ProgramContext: answer, then keep waiting
                self._send({"result": self._callback(message)})
                continue
            if "error" in message:
                raise RemoteHarnessError(message["error"], message.get("traceback", ""))
            return message.get("ok")

    def _callback(self, message: dict) -> Any:
        if message["call"] == "select_skills":
            task = _build(Task, message["task"])
            return [s.name for s in self.ctx.select_skills(task, int(message["k"]))]
        if message["call"] == "count_tokens":
            return int(self.ctx.count_tokens(str(message["text"])))
        if message["call"] == "run_skill":
            return str(self.ctx.run_skill(str(message["name"]), str(message["script"]),
                                          [str(a) for a in message.get("args", [])], str(message.get("stdin", ""))))
        return None

    def _send(self, message: dict) -> None:
        try:
            self.session.proc.stdin.write((json.dumps(message, default=str) + "\n").encode())
            self.session.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise self._died(f"could not write to it ({exc!r})") from None

    def _receive(self, deadline: float, what: str, seconds: float) -> dict:
        from evolver.lockstep import HarnessTimeout  # the evaluator's side only

        fd = self.session.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise HarnessTimeout(f"a harness call ran longer than {seconds:.0f}s ({what}, sandboxed)")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise self._died(f"it exited during {what}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _died(self, how: str) -> RemoteHarnessError:
        self.session.proc.wait(timeout=5)
        code = self.session.proc.returncode
        tail = "\n".join(self.session.stderr().strip().splitlines()[-12:])
        limit = " (killed: memory limit?)" if code in (-9, 137) else ""
        self._dead = f"the sandboxed harness process {how}, exit code {code}{limit}"
        return RemoteHarnessError(self._dead, tail)


# -- the child's side (runs inside the sandbox) ----------------------------------------------------------

def serve(program_json: str, context_window: int = 32768) -> None:
    """Build the program's harness and answer the evaluator's calls until stdin closes."""
    from evolver.harness import make_harness, program_context

    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what the harness prints goes to stderr: stdout carries only the protocol
    sys.stdout = sys.stderr

    def send(message: dict) -> None:
        out.write(json.dumps(message, default=str) + "\n")
        out.flush()

    def ask(call: str, **args) -> Any:
        send({"call": call, **args})
        return json.loads(sys.stdin.readline())["result"]

    def fail(exc: BaseException) -> None:
        send({"error": repr(exc), "traceback": traceback.format_exc()[-3000:]})

    try:
        ctx = program_context(_build(Program, json.loads(program_json)))
        by_name = {s.name: s for s in ctx.skills}
        ctx.select_skills = lambda task, k: [by_name[n] for n in ask("select_skills", task=_plain(task), k=k)
                                             if n in by_name]
        ctx.count_tokens = lambda text: ask("count_tokens", text=text)
        ctx.context_window = context_window
        # Scripts run beside the evaluator, in a sandbox of their own, not inside this one.
        ctx.run_skill = lambda name, script, args=(), stdin="": ask("run_skill", name=name, script=script,
                                                                     args=list(args), stdin=stdin)
        harness = make_harness(ctx)
    except ModuleNotFoundError as exc:
        fail(ModuleNotFoundError(f"{exc}: a sandboxed harness imports the standard library, evolver's harness "
                                 "API (evolver.harness, evolver.types) and the packages its benchmark declares "
                                 "(harness_packages); nothing else that is installed"))
        return
    except BaseException as exc:
        fail(exc)
        return
    send({"ok": "ready"})
    states: dict[int, Any] = {}
    requests: dict[int, Any] = {}  # parse() gets the very object next_call() returned
    for line in sys.stdin:
        message = json.loads(line)
        op, sid = message["op"], message.get("state")
        try:
            obs = _build(Observation, message["obs"]) if "obs" in message else None
            if op == "start":
                sid = len(states)
                states[sid] = harness.start(_build(Task, message["task"]), obs)
                send({"ok": sid})
            elif op == "next_call":
                requests[sid] = harness.next_call(states[sid], obs)
                send({"ok": encode_request(requests[sid])})
            elif op == "parse":
                action = harness.parse(states[sid], obs, requests.get(sid), decode_result(message["result"]))
                if not isinstance(action, Action):
                    raise TypeError(f"harness.parse returned {action!r}, not an evolver.harness.Action")
                send({"ok": _plain(action)})
            elif op == "observe":
                harness.observe(states[sid], _build(Action, message["action"]), message["text"])
                send({"ok": None})
            else:
                send({"error": f"unknown operation {op!r}"})
        except BaseException as exc:
            fail(exc)


class Harnesses:
    """Building a program's harness outside the evaluator (a namespace: ``Harnesses.make(ctx)``).

    ``INTERFACE``: the harness contract as text (what a proposer that rewrites harnesses shows its model);
    ``SEED_DIR``: the default harness, ``prompt.md`` and seed skills a new program starts from;
    ``Sandboxed``: a candidate's harness in a sandboxed process of its own (:class:`SandboxedHarness`)."""

    INTERFACE: str = HARNESS_INTERFACE
    SEED_DIR = SEED_DIR
    Sandboxed = SandboxedHarness
    context = staticmethod(program_context)
    make = staticmethod(make_harness)
    task = staticmethod(task_for_harness)


@contextlib.contextmanager
def sandboxed_harnesses(run, benchmark=None):
    """A harness factory that starts one sandboxed harness process per job, all closed on exit; each may
    import what the benchmark (default ``run.benchmark``) declares in ``harness_packages``."""
    opened: list = []
    declared = getattr(benchmark or getattr(run, "benchmark", None), "harness_packages", None) or {}

    def factory(ctx: ProgramContext):
        opened.append(SandboxedHarness(ctx, memory_mb=run.config.loop.harness_memory_mb, packages=list(declared)))
        return opened[-1]
    try:
        yield factory
    finally:
        for harness in opened:
            harness.close()
