#!/usr/bin/env bash
# Create .venv and install kitchen with its test and dev extras.
#
# torch: machines without an NVIDIA GPU get the CPU build (no multi-GB CUDA download); machines
# with one (nvidia-smi works) get PyPI's default CUDA build. An already-installed torch is kept.
# Override the requirement with KITCHEN_TORCH (e.g. KITCHEN_TORCH="torch==2.13.0"), the
# environment with KITCHEN_VENV and the extras with KITCHEN_EXTRAS (scripts/setup_vllm.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
torch_spec=${KITCHEN_TORCH:-torch==2.13.0}
venv=${KITCHEN_VENV:-.venv}
extras=${KITCHEN_EXTRAS:-test,dev}
cpu_index=https://download.pytorch.org/whl/cpu

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)

if "$venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "setup: keeping installed torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "setup: NVIDIA GPU found, installing CUDA $torch_spec"
  "${pip[@]}" "$torch_spec"
else
  echo "setup: no GPU, installing CPU $torch_spec"
  "${pip[@]}" --retries 1 --extra-index-url "$cpu_index" "$torch_spec" 2> >(grep -v "Retrying\|NewConnectionError" >&2)
fi

"${pip[@]}" -e ".[$extras]"

# A CPU build of torch on a GPU machine trains on the CPU without a word (local.device defaults to
# cuda only when torch sees one): say so loudly, with the fix.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
  ! "$venv/bin/python" -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo "setup: WARNING: this machine has an NVIDIA GPU but $venv's torch" \
    "($("$venv/bin/python" -c 'import torch; print(torch.__version__)')) cannot use it; training would run on the CPU." \
    "Reinstall a CUDA build: $venv/bin/python -m pip install --force-reinstall '$torch_spec'" >&2
fi

# System packages the tests use, installed only as root with apt-get; a failed install never fails
# setup (their tests then skip, saying why). bubblewrap: the default sandbox for model-written code
# (without it, code runs fall back to the weaker process sandbox, with a warning). chromium: the
# report's browser tests.
wanted=()
command -v bwrap >/dev/null 2>&1 || wanted+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || wanted+=(chromium)
if [ ${#wanted[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing ${wanted[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${wanted[@]}"; } >/dev/null 2>&1 ||
    echo "setup: could not install ${wanted[*]}; the tests that need them will be skipped"
elif [ ${#wanted[@]} -gt 0 ]; then
  echo "setup: missing ${wanted[*]} (install with your package manager, e.g. sudo apt-get install ${wanted[*]})"
fi
echo "setup: done ($venv)"
