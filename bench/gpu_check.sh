#!/usr/bin/env bash
# One short GPU check for the GRPO trainer (run it on a machine with a CUDA GPU and vLLM installed):
# vLLM rollout tokens/s at batch 1/8/32, the step-0 log-prob gap between vLLM and the learner, and
# the time of a few GRPO steps with the vLLM engine (weights pushed after every update).
#
#   bench/gpu_check.sh [STEPS]        (EVOLVER_MODEL_DIR may point at any HF folder; default: embedded)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export HF_HUB_OFFLINE=1 EVOLVER_PLUGINS=${EVOLVER_PLUGINS:-reasoning-gym,grpo}
"$PY" - <<'PY'
import torch, sys
if not torch.cuda.is_available():
    sys.exit("gpu_check: no CUDA GPU visible to torch")
import vllm
print(f"GPU: {torch.cuda.get_device_name(0)}  torch {torch.__version__}  vllm {vllm.__version__}")
PY
timeout 300 "$PY" bench/grpo_engines.py --vllm-python "$PY" --batches 1,8,32 --tokens 128
timeout 300 "$PY" bench/grpo_gpu_steps.py --steps "${1:-3}"
