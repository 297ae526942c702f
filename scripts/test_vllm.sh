#!/usr/bin/env bash
# The vLLM engine's tests (tests/adapters/vllm_engine), in .venv-vllm (made by scripts/setup_vllm.sh
# first). Each test module starts one engine: on 2 busy CPU cores the run takes about 30 minutes.
# Extra arguments go to pytest (e.g. -k lora).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_vllm.sh
.venv-vllm/bin/python -m pytest tests/adapters/vllm_engine -q -p no:cacheprovider "$@"
