"""The `backend` fixture of the contract suite when it runs from the installed package: the
backend named by `--kitchen-backend`, built by its registered factory (kitchen's own suite
parametrizes `backend` over the built-in backends instead: `tests/contract/conftest.py`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from kitchen.engine.backends import get_backend_spec
from kitchen.engine.config.loading import load_config
from kitchen.engine.config.run import RunConfig
from kitchen.engine.ports import ServiceBackend


@pytest.fixture
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServiceBackend]:
    """A fresh backend writing checkpoints under the test's tmp_path; closed after the test."""
    name = request.config.getoption("kitchen_backend")
    if not name:
        pytest.skip("kitchen's backend contract suite runs against --kitchen-backend=NAME (a registered backend)")
    options = [f"{name}.{option}" for option in request.config.getoption("kitchen_backend_option")]
    config = load_config(RunConfig, None, [f"backend={name}", "model_name=tiny", *options])
    service = get_backend_spec(name).build(config, tmp_path)
    yield service
    asyncio.run(service.close())
