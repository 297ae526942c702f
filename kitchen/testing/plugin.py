"""kitchen's pytest plugin (entry point `pytest11`): the `kitchen_run` fixture and the
`--kitchen-backend` option of the contract suite. See `kitchen.testing`.

Kept light: nothing heavy is imported until a fixture is used, since pytest loads this module in
every test session of an environment where kitchen is installed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kitchen.testing import RunResult, Target


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kitchen")
    group.addoption(
        "--kitchen-backend",
        default=None,
        metavar="NAME",
        help="run kitchen's backend contract suite against this registered backend "
        "(pytest --pyargs kitchen.testing.contract --kitchen-backend=NAME)",
    )
    group.addoption(
        "--kitchen-backend-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of that backend's config section, e.g. --kitchen-backend-option device=cuda (repeatable)",
    )


@pytest.fixture
def kitchen_run(tmp_path: Path) -> Callable[..., RunResult]:
    """`kitchen_run(target, *overrides, config=None, replies=None, sampler_logprob_shift=0.0,
    hooks=())`: run a recipe or workflow on the noop backend in a fresh directory under the
    test's tmp_path (see `kitchen.testing.run_on_noop`); each call gets its own directory."""
    from kitchen.testing import run_on_noop

    runs = iter(range(1_000_000))

    def run(target: Target, *overrides: str, **options: Any) -> RunResult:
        return run_on_noop(target, *overrides, log_path=tmp_path / f"run{next(runs)}", **options)

    return run
