"""The static decode path (``static_decode.py``): a static KV cache and a decode step with static
shapes, captured as a CUDA graph on a GPU. Here it runs eagerly (``decode="static"``, no CUDA) and must
give the loop's greedy text and log-probs; the graph itself is checked where CUDA is present."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from evolver import BackendError, GenRequest, Message

CONVERSATIONS = [
    [Message("user", "hi")],
    [Message("system", "You are terse."), Message("user", "list three fruits please"),
     Message("assistant", "apple, pear"), Message("user", "and one more? <|im_end|> tricky")],
    [Message("user", "a somewhat longer prompt, to force left padding on the short ones")],
    [Message("user", "x")],
    [Message("user", "what is 2+2")],
]
CUDA = torch.cuda.is_available()


def backend(tiny_model_dir, decode: str, **kw):
    from evolver_transformers.backend import TransformersBackend

    kw.setdefault("dtype", "fp32")
    kw.setdefault("max_batch", 8)
    kw.setdefault("device", "cpu" if decode != "graphs" else "cuda")
    return TransformersBackend(model=str(tiny_model_dir), decode=decode, **kw)


def full_forward_logprobs(b, res) -> list[float]:
    full = torch.tensor([res.prompt_ids + res.completion_ids], device=b.device)
    with torch.inference_mode():
        lp = torch.log_softmax(b.hf_model(full).logits[0].float(), -1)
    P = len(res.prompt_ids)
    return [float(lp[P - 1 + i, t]) for i, t in enumerate(res.completion_ids)]


@pytest.fixture(scope="module")
def loop(tiny_model_dir):
    return backend(tiny_model_dir, "loop")


@pytest.fixture(scope="module")
def static(tiny_model_dir):
    return backend(tiny_model_dir, "static")


def test_options(tiny_model_dir):
    from evolver_transformers.backend import TransformersBackend

    with pytest.raises(BackendError, match="decode"):
        TransformersBackend(model=str(tiny_model_dir), decode="fast")
    if not CUDA:
        with pytest.raises(BackendError, match="CUDA"):
            TransformersBackend(model=str(tiny_model_dir), decode="graphs", device="cpu")
        auto = TransformersBackend(model=str(tiny_model_dir), dtype="fp32")
        assert auto.decode == auto.decode_path == "loop"  # the CPU default is the loop, untouched


@pytest.mark.parametrize("lookup", [0, 8])
def test_greedy_text_and_logprobs_equal_the_loop(tiny_model_dir, static, lookup):
    loop = backend(tiny_model_dir, "loop", lookup=lookup)
    reqs = [GenRequest(c, max_tokens=24, logprobs=True) for c in CONVERSATIONS]
    want, got = loop.generate(reqs), static.generate(reqs)
    assert static.decode_path == "static" and static.decode_error is None
    for w, g in zip(want, got):
        assert g.error is None and g.completion_ids == w.completion_ids and g.text == w.text
        assert g.prompt_ids == w.prompt_ids
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-5)
    # alone (bucket of 1) and in a part-filled bucket of 8: the same replies
    assert [static.generate([r])[0].completion_ids for r in reqs] == [g.completion_ids for g in got]


def test_bf16_autocast_matches_the_loop(tiny_model_dir):
    reqs = [GenRequest(c, max_tokens=12, logprobs=True) for c in CONVERSATIONS]
    want = backend(tiny_model_dir, "loop", dtype="bf16", lookup=0).generate(reqs)
    b = backend(tiny_model_dir, "static", dtype="bf16")
    got = b.generate(reqs)
    same = sum(w.completion_ids == g.completion_ids for w, g in zip(want, got))
    assert same >= len(reqs) - 1  # bf16 may round a near tie differently in another batch shape
    for w, g in zip(want, got):
        if w.completion_ids == g.completion_ids:
            assert g.logprobs == pytest.approx(w.logprobs, abs=5e-2)
        assert g.logprobs == pytest.approx(full_forward_logprobs(b, g), abs=0.1)  # vs fp32


def test_sampled_logprobs_are_the_models_and_a_seed_ignores_the_batch(static):
    reqs = [GenRequest(c, max_tokens=16, temperature=t, seed=s, logprobs=True)
            for (c, t, s) in zip(CONVERSATIONS, (1.0, 0.7, 1.3, 1.0, 0.0), (1, 2, 3, 4, 5))]
    got = static.generate(reqs)
    for g in got:
        assert g.logprobs == pytest.approx(full_forward_logprobs(static, g), abs=1e-4)
    again = static.generate(reqs[::-1])[::-1]
    assert [g.completion_ids for g in again] == [g.completion_ids for g in got]
    assert static.generate([reqs[2]])[0].completion_ids == got[2].completion_ids
    other = static.generate([GenRequest(CONVERSATIONS[0], max_tokens=16, temperature=1.0, seed=99)])[0]
    assert other.completion_ids != got[0].completion_ids


def test_the_sampler_draws_the_softmax_from_prefix_stable_uniforms():
    from evolver_transformers.static_decode import pick, uniforms

    u = uniforms(7, 40000)
    assert u.dtype == np.float32 and 0 < u.min() and u.max() < 1 and abs(float(u.mean()) - 0.5) < 0.01
    assert np.array_equal(uniforms(7, 10), u[:10]) and not np.array_equal(uniforms(8, 10), u[:10])
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0])
    n = 20000
    for t in (0.7, 1.0, 2.0):
        tok, lp = pick(logits.expand(n, 4), torch.full((n,), t), torch.from_numpy(u[:n]))
        freq = torch.bincount(tok, minlength=4) / n
        assert torch.allclose(freq, torch.softmax(logits / t, -1), atol=0.015), (t, freq)
        assert torch.allclose(lp, torch.log_softmax(logits, -1)[tok])  # log-probs at temperature 1
    greedy, _ = pick(logits.expand(3, 4), torch.zeros(3), torch.rand(3))
    assert greedy.tolist() == [0, 0, 0]


def test_stop_rules_and_limits_match_the_loop(loop, static, monkeypatch):
    # a stop string across the boundary of two reads of the device's tokens (replies are read 8 at a time)
    free = loop.generate([GenRequest(CONVERSATIONS[4], max_tokens=30)])[0].text
    across = free[7:11]
    assert len(across) == 4 and free.find(across) == 7
    reqs = [GenRequest(CONVERSATIONS[0], max_tokens=30, stop=["e", "a"]),
            GenRequest(CONVERSATIONS[4], max_tokens=30, stop=["\u00e9t\u00e9", across]),
            GenRequest(CONVERSATIONS[2], max_tokens=3),
            GenRequest(CONVERSATIONS[1], max_tokens=30, logprobs=True),
            GenRequest(CONVERSATIONS[3], max_tokens=1, logprobs=True)]
    want = loop.generate(reqs)
    # a row hitting EOS mid-batch: pretend one of the tokens the loop wrote is EOS, on both paths
    eos = want[3].completion_ids[4]
    monkeypatch.setattr(loop, "eos_ids", loop.eos_ids | {eos})
    monkeypatch.setattr(static, "eos_ids", static.eos_ids | {eos})
    want, got = loop.generate(reqs), static.generate(reqs)
    for w, g in zip(want, got):
        assert (g.text, g.completion_tokens) == (w.text, w.completion_tokens)
    assert got[1].text == free[:7] and got[2].completion_tokens <= 3 and got[4].completion_tokens == 1
    assert got[3].completion_ids[-1] == eos and len(got[3].completion_ids) <= 5


def test_weights_updated_in_place_are_decoded_with(tiny_model_dir):
    """The trainer updates the backend's own parameters in place: the next call decodes with them."""
    reqs = [GenRequest(c, max_tokens=10, logprobs=True) for c in CONVERSATIONS]
    for dtype in ("fp32", "bf16"):
        b = backend(tiny_model_dir, "static", dtype=dtype)
        ref = backend(tiny_model_dir, "loop", dtype=dtype, lookup=0)
        before = b.generate(reqs)
        with torch.no_grad():
            for m in (b, ref):
                for p in m.hf_model.parameters():
                    p.mul_(1.5)
                m.weights_changed()  # as the trainer's sync does: the cached prompt KV is stale
        after, want = b.generate(reqs), ref.generate(reqs)
        assert [a.completion_ids for a in after] != [x.completion_ids for x in before]
        same = sum(a.completion_ids == w.completion_ids for a, w in zip(after, want))
        assert same >= len(reqs) - (dtype == "bf16")
        for a, w in zip(after, want):
            if dtype == "fp32":
                assert a.logprobs == pytest.approx(full_forward_logprobs(b, a), abs=1e-4)
            elif a.completion_ids == w.completion_ids:  # bf16: the loop's rounding, not fp32's
                assert a.logprobs == pytest.approx(w.logprobs, abs=5e-2)


def test_bf16_copies_are_refreshed_in_place():
    from torch import nn

    from evolver_transformers.bf16_weights import cached_copies, keep_bf16_weights, refresh_bf16_copies

    lin = nn.Linear(4, 3)
    keep_bf16_weights(lin)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        lin(torch.ones(2, 4))
    copy = cached_copies(lin)[0]
    assert refresh_bf16_copies(lin) == 0
    with torch.no_grad():
        lin.weight.add_(1.0)
    assert refresh_bf16_copies(lin) == 1
    assert cached_copies(lin)[0] is copy and torch.equal(copy, lin.weight.detach().to(torch.bfloat16))


def test_an_unsupported_model_or_a_failure_falls_back_to_the_loop(tiny_model_dir, loop, monkeypatch, caplog):
    from evolver_transformers import static_decode

    reqs = [GenRequest(c, max_tokens=8, logprobs=True) for c in CONVERSATIONS[:3]]
    want = [r.completion_ids for r in loop.generate(reqs)]
    monkeypatch.setattr(static_decode, "why_unsupported", lambda model: "a test says so")
    b = backend(tiny_model_dir, "static")
    assert [r.completion_ids for r in b.generate(reqs)] == want
    assert b.decode_path == "loop" and "a test says so" in b.decode_error
    monkeypatch.undo()

    b = backend(tiny_model_dir, "static")

    def broken(self, st):
        raise RuntimeError("boom")
    monkeypatch.setattr(static_decode.StaticDecoder, "_step_eager", broken)
    assert [r.completion_ids for r in b.generate(reqs)] == want
    assert b.decode_path == "loop" and "boom" in b.decode_error and b.timing["static_failures"] == 1
    assert "boom" in caplog.text


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_cuda_graphs_equal_the_eager_step_and_see_weight_updates(tiny_model_dir, dtype):
    reqs = [GenRequest(c, max_tokens=20, logprobs=True) for c in CONVERSATIONS]
    sampled = [GenRequest(c, max_tokens=20, temperature=1.0, seed=i, logprobs=True) for i, c in enumerate(CONVERSATIONS)]
    g = backend(tiny_model_dir, "graphs", dtype=dtype)
    e = backend(tiny_model_dir, "static", dtype=dtype, device="cuda")
    loop = backend(tiny_model_dir, "loop", dtype=dtype, device="cuda", lookup=0)
    for batch in (reqs, sampled):
        a, b = g.generate(batch), e.generate(batch)
        assert g.decode_path == "graphs" and g.decode_error is None and g.timing["graph_replays"] > 0
        assert [x.completion_ids for x in a] == [x.completion_ids for x in b]
        for x, y in zip(a, b):
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4 if dtype == "fp32" else 0.1)
    slack = 0 if dtype == "fp32" else 1  # bf16 may round a near tie differently in another shape

    def agree(a, b):
        return sum(x.completion_ids == y.completion_ids for x, y in zip(a, b)) >= len(a) - slack
    assert agree(g.generate(reqs), loop.generate(reqs))
    captures = g.timing["graph_captures"]
    with torch.no_grad():
        for m in (g, loop):
            for p in m.hf_model.parameters():
                p.mul_(1.5)
            m.weights_changed()
    after = g.generate(reqs)
    assert g.timing["graph_captures"] == captures  # the same graphs, the new weights
    assert agree(after, loop.generate(reqs))
