#!/usr/bin/env bash
# Install the environment hubs' packages (the `hubs` extra: verifiers 0.4 and openenv-core) into .venv,
# for `env: openenv`; their tests (tests/env_hubs) skip without them. verifiers 0.4 pins openai<3 and
# mcp==2.0.0, which the test and mcp extras accept; `env: verifiers` runs verifiers 0.3 and refuses
# 0.4 by version (docs/how-to/agentic-rl.md). .ci/run runs this after scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${KITCHEN_VENV:-.venv}
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[hubs]"
"$venv/bin/python" -c "from importlib.metadata import version as v; print(f\"setup: verifiers {v('verifiers')}, openenv-core {v('openenv-core')}\")"
