"""Which precision the embedded model computes in: bf16 autocast where the hardware has bf16 math,
fp32 where it would be emulated.

bf16 autocast (fp32 master weights, bf16 matmuls) was 1.5-2x faster than fp32 on the Xeons with
AVX512-BF16 and AMX these numbers were first measured on. On a CPU without them (AVX2-only EPYCs)
every bf16 op is converted in software and the same work is several times *slower* than fp32
(``bench/dtype_choice.py``). So ``"auto"``, the default everywhere a dtype or autocast is chosen,
asks the hardware. CUDA GPUs keep bf16 autocast (native since Ampere).
"""
from __future__ import annotations

import torch

BF16 = {"bf16", "bfloat16"}
FP32 = {"fp32", "float32"}
CHOICES = BF16 | FP32 | {"auto"}


def bf16_native(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 natively (so autocast to bf16 speeds it up)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    # torch's own probes (private, so looked up): without them, keep the old default of bf16.
    probes = [getattr(torch.cpu, n, None) for n in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if not any(probes):
        return True
    return any(p() for p in probes if p is not None)


def use_autocast(dtype: str | bool | None, device: torch.device) -> bool:
    """Resolve a configured precision to "run under bf16 autocast?": ``"bf16"``/``True`` yes,
    ``"fp32"``/``False`` no, ``"auto"``/``None`` as the hardware suits (``bf16_native``)."""
    if isinstance(dtype, bool):
        return dtype
    if dtype is None or dtype == "auto":
        return bf16_native(device)
    if dtype in BF16:
        return True
    if dtype in FP32:
        return False
    raise ValueError(f"dtype {dtype!r} not supported; use 'auto', 'bf16' (autocast) or 'fp32'")
