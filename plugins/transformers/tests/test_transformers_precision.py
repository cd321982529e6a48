"""dtype = "auto": bf16 autocast only where the hardware computes bf16 natively."""
import pytest
import torch

from evolver_transformers import precision
from evolver_transformers.precision import bf16_native, use_autocast
from tinymodel import build_tiny_model

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def cpu_with(monkeypatch):
    def set_flags(avx512_bf16: bool, amx: bool) -> None:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    return set_flags


@pytest.mark.parametrize("avx512_bf16,amx,native", [(False, False, False), (True, False, True),
                                                    (False, True, True)])
def test_auto_follows_the_cpus_bf16_support(cpu_with, avx512_bf16, amx, native):
    cpu_with(avx512_bf16, amx)
    assert bf16_native(CPU) is native
    assert use_autocast("auto", CPU) is native and use_autocast(None, CPU) is native


def test_explicit_choices_win_over_the_hardware(cpu_with):
    cpu_with(False, False)
    assert use_autocast("bf16", CPU) and use_autocast("bfloat16", CPU) and use_autocast(True, CPU)
    assert not use_autocast("fp32", CPU) and not use_autocast(False, CPU)
    with pytest.raises(ValueError, match="'auto', 'bf16'"):
        use_autocast("fp16", CPU)


def test_the_backend_runs_fp32_on_a_cpu_without_bf16_and_autocasts_with_it(cpu_with, tiny_model_dir):
    from evolver_transformers.bf16_weights import Bf16CachedLinear
    from evolver_transformers.backend import TransformersBackend

    cpu_with(False, False)
    plain = TransformersBackend(model=str(tiny_model_dir), device="cpu")
    assert not plain.autocast and not isinstance(plain.hf_model.lm_head, Bf16CachedLinear)
    cpu_with(False, True)
    fast = TransformersBackend(model=str(tiny_model_dir), device="cpu")
    assert fast.autocast and isinstance(fast.hf_model.lm_head, Bf16CachedLinear)


def test_training_log_probs_resolve_auto_the_same_way(cpu_with, tiny_model_dir, monkeypatch):
    from transformers import AutoModelForCausalLM

    completion_logprobs = pytest.importorskip("evolver_training.logprobs").completion_logprobs  # the training layer's

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    seen = []
    real = torch.autocast
    monkeypatch.setattr(torch, "autocast", lambda *a, **k: seen.append(k.get("dtype")) or real(*a, **k))
    for native in (False, True):
        cpu_with(native, False)
        completion_logprobs(model, [[1, 2, 3]], [[4, 5]], autocast=None)
    assert seen == [torch.bfloat16]  # once: only where bf16 is native


def test_probes_missing_keep_bf16(monkeypatch):
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.delattr(torch.cpu, name, raising=False)
    assert precision.bf16_native(CPU)
