#!/usr/bin/env bash
# Install tinker-cookbook 0.6.1 into .venv (after scripts/setup.sh) so the renderer parity tests
# (tests/train_core/renderers/test_renderers_cookbook_parity.py) compare kitchen's renderers
# with the reference's; without it they skip, saying why. --no-deps: one of its dependencies
# (tml-renderers) is not published, and its renderers need only what kitchen's test extra
# already installs (tinker, torch, transformers).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps "tinker-cookbook==0.6.1"
