"""Linear layers that keep their bf16 weight copies between autocast contexts (bf16_weights.py)."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from evolver_transformers.bf16_weights import Bf16CachedLinear, keep_bf16_weights
from tinymodel import build_tiny_model


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8, bias=False))


def _infer(model, x):
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        return model(x)


def _casts(model) -> int:
    return [id(m.__dict__["_bf16_copy"][3]) for m in model.modules() if isinstance(m, Bf16CachedLinear)]


def test_outputs_equal_autocast_bitwise_and_the_copies_survive_contexts():
    plain, cached = _model(), _model()
    assert keep_bf16_weights(cached) == 2
    x = torch.randn(3, 5, 16)[:, -1:, :]  # a strided slice, as the last position's hidden state is
    want = _infer(plain, x)
    got = _infer(cached, x)
    assert got.dtype == want.dtype == torch.bfloat16 and torch.equal(got, want)
    first = _casts(cached)
    assert torch.equal(_infer(cached, x), want)
    assert _casts(cached) == first  # the same bf16 tensors served the second context


def test_a_changed_weight_is_cast_again():
    plain, cached = _model(), _model()
    keep_bf16_weights(cached)
    x = torch.randn(4, 16)
    _infer(cached, x)
    for model in (plain, cached):  # an optimizer step: in place, under no_grad
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        model(x).square().sum().backward()
        opt.step()
    assert torch.equal(_infer(cached, x), _infer(plain, x))
    other = _model(seed=1)
    for model in (plain, cached):
        model.load_state_dict(other.state_dict())  # in place too
    assert torch.equal(_infer(cached, x), _infer(plain, x))
    with torch.no_grad():  # only a bias changes
        for model in (plain, cached):
            model[0].bias.add_(1)
    assert torch.equal(_infer(cached, x), _infer(plain, x))
    cached[0].weight = nn.Parameter(torch.zeros(32, 16))  # a new tensor
    plain[0].weight = nn.Parameter(torch.zeros(32, 16))
    assert torch.equal(_infer(cached, x), _infer(plain, x))


def test_training_and_plain_inference_use_the_fp32_weights():
    plain, cached = _model(), _model()
    keep_bf16_weights(cached)
    x = torch.randn(4, 16)
    _infer(cached, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # a learner's forward: gradients reach the weights
        cached(x).float().sum().backward()
        plain(x).float().sum().backward()
    assert cached[0].weight.grad is not None and torch.equal(cached[0].weight.grad, plain[0].weight.grad)
    with torch.no_grad():  # no autocast: fp32 all the way
        assert cached(x).dtype == torch.float32 and torch.equal(cached(x), plain(x))


def test_a_deep_copy_uses_its_own_weights():
    cached = _model()
    keep_bf16_weights(cached)
    x = torch.randn(4, 16)
    before = _infer(cached, x)
    twin = copy.deepcopy(cached)
    with torch.no_grad():
        twin[2].weight.mul_(-1)
    assert torch.equal(_infer(cached, x), before)
    assert torch.equal(_infer(twin, x), -before)


@pytest.mark.parametrize("logits_to_keep", [0, 1])
def test_the_backend_model_matches_plain_autocast(tiny_model_dir, logits_to_keep):
    from transformers import AutoModelForCausalLM

    from evolver_transformers.backend import TransformersBackend

    b = TransformersBackend(model=str(tiny_model_dir), dtype="bf16")
    assert isinstance(b.hf_model.lm_head, Bf16CachedLinear)
    plain = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    plain.set_attn_implementation(b.hf_model.config._attn_implementation)
    ids = torch.randint(0, plain.config.vocab_size, (2, 7))
    got = _infer(lambda i: b.hf_model(input_ids=i, logits_to_keep=logits_to_keep).logits, ids)
    want = _infer(lambda i: plain(input_ids=i, logits_to_keep=logits_to_keep).logits, ids)
    assert torch.equal(got, want)
