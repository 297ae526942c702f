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

# Headless Chromium for the report's browser tests (tests/report/test_browser.py skips without
# one). Only as root with apt-get; a failed install never fails setup.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing chromium for the report browser tests"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 ||
    echo "setup: chromium install failed; the report browser tests will be skipped"
fi
echo "setup: done (.venv)"
