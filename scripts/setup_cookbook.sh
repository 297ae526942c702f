#!/usr/bin/env bash
# Optional: tinker-cookbook 0.6.1 beside kitchen in .venv (after scripts/setup.sh), for
# - tests/serve/test_cookbook.py: the cookbook's recipes run unmodified against `kitchen serve`;
# - tests/train_core/renderers/test_renderers_cookbook_parity.py: kitchen's renderers against the
#   reference's.
# Without it those tests skip, saying why.
#
# --no-deps: the cookbook pins versions that conflict with kitchen's, and one of its dependencies
# (tml-renderers) is not published; what it imports that is published is installed explicitly.
set -euo pipefail
cd "$(dirname "$0")/.."
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" -e ".[serve]"
"${pip[@]}" --no-deps "tinker-cookbook==0.6.1"
"${pip[@]}" chz blobfile termcolor tiktoken pyrage aiohttp cloudpickle sympy pylatexenc math-verify  # math_rl's grading
echo "setup_cookbook: done; run e.g.  kitchen serve --models models.yaml &  then"
echo "  TINKER_API_KEY=tml-local python -m tinker_cookbook.recipes.sl_loop base_url=http://127.0.0.1:8000 model_name=/models/qwen3-0.6b"
