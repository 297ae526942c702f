#!/usr/bin/env bash
# Optional: tinker-cookbook 0.6.1 beside kitchen, to run its recipes unmodified against `kitchen serve`
# (tests/serve/test_cookbook.py uses it; without it those tests skip, saying why).
#
# The cookbook is installed with --no-deps because its requirements pin versions that conflict with
# kitchen's; what it imports and is published on PyPI is installed here explicitly.
set -euo pipefail
cd "$(dirname "$0")/.."
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" -e ".[serve]"
"${pip[@]}" --no-deps "tinker-cookbook==0.6.1"
"${pip[@]}" chz blobfile termcolor tiktoken pyrage tml-renderers aiohttp cloudpickle
echo "setup_cookbook: done; run e.g.  kitchen serve --models models.yaml &  then"
echo "  TINKER_API_KEY=tml-local python -m tinker_cookbook.recipes.sl_loop base_url=http://127.0.0.1:8000 model_name=/models/qwen3-0.6b"
