#!/usr/bin/env bash
# The scale and speed benchmarks of issue 13 on a GPU machine that has torch and PyTorch
# Geometric but no model weights and no network, in one call of a few minutes:
#   1. spreading activation on a 10^6-node memory x 64 queries (default firing rule and fire_zero);
#   2. bench_scaling's retrieval sizes, 10^3-10^6 nodes x 1-1,024 queries (ingestion is a CPU
#      benchmark and is left out);
#   3. bench_retrieval: batched SYNAPSE over all 1,986 LoCoMo questions against the numpy loop;
#   4. bench_sweep: configurations per minute of the batched sweep, chunked to the device memory,
#      with the profile of one batched call;
#   5. the tests that parametrise over CUDA, their CUDA cases.
# A failed step shows its log's tail and the next step runs; the script fails at the end.
# Inputs: the folder scripts/device_inputs.py writes here (embeddings from the cache, LoCoMo-10,
# the pure-Python packages the device image lacks), carried with the call:
#   python scripts/device_inputs.py --out .device           # here, once (about 45 MiB)
#   bash scripts/device_bench.sh .device "$OUT"             # there (device tool: carry .device)
# Environment: DEVICE (default cuda; cpu runs the same steps here), PYTHON (python3),
# STEPS (the names of the steps to run, space-separated; default all), SWEEP_CONFIGS (4096),
# SCALING_NODES ("1e3 1e4 1e5 1e6"), SCALING_BATCHES ("1 16 64 256 1024").
# Every figure goes to OUT (default outputs/device_bench): one log per step and the JSON of
# bench_scaling; the last line of each log is its headline figure.
set -euo pipefail
cd "$(dirname "$0")/.."
IN=${1:-.device}
OUTDIR=${2:-${OUT:-outputs/device_bench}}
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python3}
SWEEP_CONFIGS=${SWEEP_CONFIGS:-4096}
SCALING_NODES=${SCALING_NODES:-1e3 1e4 1e5 1e6}
SCALING_BATCHES=${SCALING_BATCHES:-1 16 64 256 1024}

for need in "$IN/locomo10.json" "$IN/cache/embeddings/encoder.json" "$IN/site"; do
  [[ -e $need ]] || { echo "device_bench: $need is missing; run scripts/device_inputs.py --out $IN" >&2; exit 2; }
done
mkdir -p "$OUTDIR"
export PYTHONPATH="$PWD:$PWD/$IN/site${PYTHONPATH:+:$PYTHONPATH}"
export SYNAPSE_DATA="$PWD/$IN/locomo10.json" SYNAPSE_CACHE="$PWD/$IN/cache"
export TQDM_DISABLE=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled
EMBED=(embedder=cached)   # the exported vectors, served under the exporting model's name

FAILED=()
step() {  # step NAME COMMAND...: run, keep the log, show its last line; a failure loses no later step
  local name=$1; shift
  local t0=$SECONDS
  if [[ -n ${STEPS:-} && " $STEPS " != *" $name "* ]]; then return; fi
  echo "== $name: $*"
  if "$@" > "$OUTDIR/$name.log" 2>&1; then
    echo "   $(tail -1 "$OUTDIR/$name.log")   ($((SECONDS - t0)) s)"
  else
    echo "device_bench: $name failed after $((SECONDS - t0)) s:" >&2
    tail -20 "$OUTDIR/$name.log" >&2
    FAILED+=("$name")
  fi
}

{
  date -u
  git rev-parse HEAD 2>/dev/null || echo "commit: not a git checkout"
  $PY -c "import torch, torch_geometric; print('torch', torch.__version__, 'pyg', torch_geometric.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no gpu')"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
  nproc
} | tee "$OUTDIR/machine.txt"

step activation $PY scripts/bench_activation.py --num-nodes 1000000 --in-degree 14 --chain \
  --batch 64 --T 3 --device "$DEVICE" --repeats 3
step activation_fire_zero $PY scripts/bench_activation.py --num-nodes 1000000 --in-degree 14 \
  --chain --batch 64 --T 3 --device "$DEVICE" --repeats 3 --fire-zero
# shellcheck disable=SC2086  # the size lists are meant to split
step scaling $PY scripts/bench_scaling.py --device "$DEVICE" --threads "$(nproc)" \
  --nodes $SCALING_NODES --batches $SCALING_BATCHES --turns --repeats 3 \
  --json "$OUTDIR/bench_scaling.json" --plot "$OUTDIR/bench_scaling.png"
step retrieval $PY scripts/bench_retrieval.py --device "$DEVICE" --repeats 3 --profile "${EMBED[@]}"
step sweep $PY scripts/bench_sweep.py --device "$DEVICE" --configs "$SWEEP_CONFIGS" --profile \
  "${EMBED[@]}"
# the tests that parametrise over CUDA (tests/conftest.py DEVICES), their CUDA cases only; the
# encoder's tests need model weights the device lacks and stay here; the files import only what
# the image and $IN/site hold (no nltk, yake)
step cuda_tests $PY -m pytest -p no:cacheprovider -o addopts="" -q -ra -k cuda \
  tests/nn/test_activation_frontier.py tests/nn/test_activation_functional.py \
  tests/graph/test_consolidation.py tests/graph/test_graph_maintenance.py \
  tests/graph/test_memory_graph.py tests/graph/test_pagerank.py tests/graph/test_graph_batch.py \
  tests/retrieval/test_synapse_retrieval.py tests/retrieval/test_bm25.py \
  tests/eval/test_sweep_chunks.py
echo "device_bench: logs in $OUTDIR"
if ((${#FAILED[@]})); then echo "device_bench: failed steps: ${FAILED[*]}" >&2; exit 1; fi
