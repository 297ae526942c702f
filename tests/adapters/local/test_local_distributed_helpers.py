"""The distributed client's helpers that need no Ray running: the bounded query the driver asks a
possibly lost head with, and what the workers' runtime environment ships."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import adapters
import kitchen
import train_core
from adapters.local.distributed import SHIPPED_PACKAGES, WorkerFailure, within, worker_runtime_env
from kitchen.engine.errors import RuntimeFailure


def test_within_returns_the_result_or_gives_up_on_a_call_that_blocks() -> None:
    assert within(5.0, lambda: 42) == (True, 42)
    never = threading.Event()
    assert within(0.2, never.wait) == (False, None)  # the daemon thread stays blocked, as on a lost head
    never.set()
    with pytest.raises(ZeroDivisionError):
        within(5.0, lambda: 1 / 0)


def test_on_a_cluster_the_workers_get_kitchens_packages_through_ray_else_the_drivers_path() -> None:
    shipped = worker_runtime_env("10.0.0.1:6379")
    assert "env_vars" not in shipped  # no path of the driver's machine
    assert shipped["py_modules"] == [str(Path(str(p.__file__)).parent) for p in (adapters, kitchen, train_core)]
    assert tuple(Path(p).name for p in shipped["py_modules"]) == SHIPPED_PACKAGES
    local = worker_runtime_env(None)
    assert local["env_vars"]["PYTHONPATH"].split(":")[0] == str(Path(kitchen.__file__).parents[1])


def test_a_worker_failure_is_a_runtime_failure() -> None:
    assert issubclass(WorkerFailure, RuntimeFailure)
