"""The acceptance tier's runs: one queue for the whole session (`tests.helpers.SeedRunner`).

`pytest -m acceptance` (one process) queues every selected module's `SEED_RUNS` when the first of
them is needed, the costliest runs first, and runs `ACCEPTANCE_JOBS` at a time; each module's tests
wait only for their own runs. Under pytest-xdist a worker sees the whole collection, so there each
module queues only its own runs, when its tests start."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.helpers import SeedRunner, SeedRuns

ACCEPTANCE_JOBS = 4
"""Runs at once, twice the 2 cores: the sandboxed recipes wait on their commands part of the time.
On a fresh clone (2026-11-28) the tier took 16:51 at 4 and 16:48 at 6, so more runs at once do not
help: it is bound by the cores."""


@pytest.fixture(scope="session")
def seed_runner(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeedRunner]:
    runner = SeedRunner(tmp_path_factory, ACCEPTANCE_JOBS)
    if "PYTEST_XDIST_WORKER" not in os.environ:
        planned: dict[SeedRuns, None] = {}
        for item in request.session.items:
            runs = getattr(getattr(item, "module", None), "SEED_RUNS", None)
            if isinstance(runs, SeedRuns) and item.get_closest_marker("acceptance"):
                planned[runs] = None
        for runs in sorted(planned, key=lambda runs: -runs.cpu_seconds):
            runner.queue(runs)
    yield runner
    runner.close()
