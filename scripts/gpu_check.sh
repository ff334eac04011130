#!/usr/bin/env bash
# The device check of the vLLM backend and the member runtime on one CUDA GPU, in one run (at most 8 min
# after the install: each step has its own time limit): what nothing on a CPU machine can show.
#
#   bash scripts/gpu_check.sh            # results under $OUT (default results/gpu_check)
#
# 1. vllm==0.33.0 (the [vllm] extra, Model Runner V2 by default) in a venv of its own (.venv-gpu;
#    scripts/ci_vllm.sh with VLLM_PIN), then tests/vllm on CUDA: tiny random members, greedy identity
#    with the HF engine, Monte Carlo exactness, the runner choice (a composite on the V1 runner) and the
#    bypass error; the served tests are left out (they start a server: minutes).
# 2. `python -m scripts.bench vllm`: random members with compute that shows (--preset deep), bf16, batch 1
#    and 8, standard (γ 0) against speculation (γ 3), alternate proposals and the whole composite, for two
#    members (WE, CD) and three (we3).
# 3. scripts/bench_gpu.py: random-weight members of the real shapes (Qwen2.5 0.5B/1.5B, Llama 1B/8B):
#    eager vs captured forwards, c, and the HF engine's rounds.
# Weights cannot travel to a lent GPU machine, and speed does not depend on their values: acceptance
# comes from the real pair on CPU. A machine without internet needs the wheels beside it (WHEELS=dir:
# pip installs from there only). Exits non-zero when a test fails; every step's log is under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-results/gpu_check}"
mkdir -p "$OUT"
export VENV_VLLM="${VENV_GPU:-.venv-gpu}" VLLM_PIN="vllm==0.33.0"
if [ -n "${WHEELS:-}" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS="$WHEELS"; fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
status=0
bash scripts/ci_vllm.sh --collect-only -q > "$OUT/install.log" 2>&1 || { tail -30 "$OUT/install.log"; exit 1; }  # the install
timeout 180 bash scripts/ci_vllm.sh -x -k "not serve" 2>&1 | tee "$OUT/tests.log" || status=1
PY="$VENV_VLLM/bin/python"
export HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
timeout 150 "$PY" -m scripts.bench vllm --preset deep --dtype bfloat16 --batches 1 8 --gammas 3 --combinations we cd we3 \
    --proposals both --new-tokens 64 --json-out "$OUT/bench_vllm.jsonl" 2>&1 | tee "$OUT/bench_vllm.log" || status=1
OUT="$OUT" timeout 150 "$PY" scripts/bench_gpu.py --budget 120 --repeats 10 2>&1 | tee "$OUT/bench_gpu.log" || status=1
echo "== gpu_check finished with status $status; logs in $OUT"
exit "$status"
