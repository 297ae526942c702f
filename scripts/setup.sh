#!/usr/bin/env bash
# Create .venv and install kitchen with its test and dev extras.
#
# torch: machines without an NVIDIA GPU get the CPU build (no multi-GB CUDA download); machines
# with one (nvidia-smi works) get PyPI's default CUDA build. An already-installed torch is kept.
# Override the requirement with KITCHEN_TORCH (e.g. KITCHEN_TORCH="torch==2.13.0").
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
torch_spec=${KITCHEN_TORCH:-torch==2.13.0}
cpu_index=https://download.pytorch.org/whl/cpu

[ -x .venv/bin/python ] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)

if .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "setup: keeping installed torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "setup: NVIDIA GPU found, installing CUDA $torch_spec"
  "${pip[@]}" "$torch_spec"
else
  echo "setup: no GPU, installing CPU $torch_spec"
  "${pip[@]}" --retries 1 --extra-index-url "$cpu_index" "$torch_spec" 2> >(grep -v "Retrying\|NewConnectionError" >&2)
fi

"${pip[@]}" -e ".[test,dev]"

# bubblewrap: the default sandbox for model-written code. Optional: without it kitchen falls back
# to the weaker process sandbox (with a warning).
if command -v bwrap >/dev/null 2>&1; then
  :
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing bubblewrap (code sandbox)"
  { apt-get update -qq && apt-get install -y -qq bubblewrap; } >/dev/null 2>&1 \
    || echo "setup: could not install bubblewrap; code runs will use the process sandbox"
else
  echo "setup: bubblewrap not found; for the code sandbox install it (e.g. sudo apt-get install bubblewrap)"
fi
echo "setup: done (.venv)"
