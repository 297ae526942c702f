#!/usr/bin/env bash
# Add lm-evaluation-harness to the .venv that scripts/setup.sh made: the `lm-eval` extra
# (`kitchen eval TARGET --harness lm-eval --tasks ...`). Its tests (tests/eval/test_lm_eval_harness.py)
# skip, saying so, until this has run. The installed torch is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[lm-eval]"
.venv/bin/python -c "import lm_eval; print('setup: lm-eval', lm_eval.__version__, 'installed')"
