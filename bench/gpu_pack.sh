#!/usr/bin/env bash
# Prepares .gpu/ (git-ignored) so bench/gpu_check.sh runs on a bare GPU machine with no network whose
# python (3.12 by default) has torch and transformers but not the rest of evolver's core
# dependencies: wheels of those (the versions installed here), a git .deb in case the machine has no
# git, and the embedded model's config and tokenizer (its weights are too large to carry).
#
#   bench/gpu_pack.sh            then carry .gpu with the working tree and run bench/gpu_check.sh there
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
PYVER=${GPU_PYTHON_VERSION:-3.12}
rm -rf .gpu && mkdir -p .gpu/whl .gpu/deb .gpu/model-shape
specs=$("$PY" - <<'PY'
import importlib.metadata as md
names = ["duckdb", "GitPython", "gitdb", "smmap", "pydantic", "pydantic_core", "annotated-types",
         "typing-inspection", "tomli_w"]
print(" ".join(f"{n}=={md.version(n)}" for n in names))
PY
)
for spec in $specs; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d .gpu/whl "$spec"
done
(cd .gpu/deb && apt-get download git >/dev/null 2>&1) || echo "gpu_pack: no git .deb fetched; the GPU machine needs its own git"
"$PY" - <<'PY'
import shutil
from pathlib import Path
from evolver_transformers.embedded import embedded_model_dir
src = embedded_model_dir()
for f in src.iterdir():
    if f.is_file() and not f.name.endswith((".safetensors", ".bin", ".gguf")):
        shutil.copy(f, Path(".gpu/model-shape") / f.name)
PY
du -sh .gpu .gpu/*
