#!/usr/bin/env bash
# kitchen's GPU path, checked in one command (the steps: scripts/gpu_check.py, and
# docs/explanation/performance.md#checking-a-gpu). JSON results on stdout; exit 1 if a step failed;
# exit 0 with "no GPU" where torch sees none.
#
#   bash scripts/gpu_check.sh [--cpu] [--only STEP ...] [--out FILE]
#       --cpu: every step on the CPU at tiny shapes (how the script itself is tested)
#   bash scripts/gpu_check.sh --fetch-wheels
#       here, with network: wheels of kitchen's own dependencies that a bare GPU image (torch,
#       transformers, peft, accelerate, safetensors, tokenizers) lacks, into .gpu_wheels/, for the
#       `kitchen` CLI there; the check itself needs none of them
#   bash scripts/gpu_check.sh --carry
#       the ignored paths a device run must carry along with the working tree
#
# Python: $PYTHON, else .venv/bin/python, else python3. Wall-clock limit: $KITCHEN_GPU_CHECK_TIMEOUT
# seconds (default 540; each step has its own time box as well).
set -euo pipefail
cd "$(dirname "$0")/.."

wheels=.gpu_wheels
# kitchen's runtime dependencies beyond a bare GPU image, with theirs (no other resolution there)
wheel_packages=(pydantic pydantic-core annotated-types typing-inspection structlog rich markdown-it-py mdurl
  opentelemetry-api importlib-metadata zipp)

case "${1:-}" in
--carry)
  echo "$wheels"
  exit 0
  ;;
--fetch-wheels)
  rm -rf "$wheels" && mkdir -p "$wheels"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --implementation cp -d "$wheels" "${wheel_packages[@]}"
  du -sh "$wheels"
  exit 0
  ;;
esac

python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
if [ -d "$wheels" ] && ! "$python" -c "import pydantic" 2>/dev/null; then
  "$python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
    --target "$wheels/site" "$wheels"/*.whl >&2
  export PYTHONPATH="$PWD/$wheels/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1
exec timeout "${KITCHEN_GPU_CHECK_TIMEOUT:-540}" "$python" scripts/gpu_check.py "$@"
