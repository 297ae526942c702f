#!/usr/bin/env bash
# Install the environment hubs' packages (the `hubs` extra: verifiers and openenv-core) into .venv,
# for `env: verifiers` and `env: openenv`; their tests (tests/env_hubs) skip without them.
# scripts/setup.sh installs the extra too; this script is for an environment set up without it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${KITCHEN_VENV:-.venv}
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[hubs]"
"$venv/bin/python" -c "from importlib.metadata import version as v; print(f\"setup: verifiers {v('verifiers')}, openenv-core {v('openenv-core')}\")"
