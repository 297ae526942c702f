"""Suite-wide settings: tests check behaviour, not speed, so torch runs single-threaded (no
OpenMP oversubscription when the machine is busy) and hypothesis examples have no deadline (a
loaded machine must not fail a property); benchmarks measure speed separately."""

from __future__ import annotations

import os
import tempfile

import pytest
import torch
from hypothesis import settings

# No network beyond 127.0.0.1 in tests: the Hugging Face libraries read these when first imported
# (so a test's own setenv comes too late), and without them a name missing from the local cache
# is looked up on the hub with retries and back-off. Inherited by CLI subprocesses.
for _variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_variable, "1")

torch.set_num_threads(1)
settings.register_profile("kitchen", deadline=None)
settings.load_profile("kitchen")

# The record cache (kitchen.engine.runs.record_cache) of this test session goes under the session's temp dir,
# not the user's ~/.cache: set before any test reads data, inherited by CLI subprocesses.
if "KITCHEN_CACHE_DIR" not in os.environ:
    os.environ["KITCHEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kitchen-test-cache-")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with end-to-end (slow) tests first, otherwise in collected order: under `--dist
    loadfile` the two workers take whole modules in this order, so the long ones start first and
    the quick ones fill in at the end (else the suite ends on one long module running alone)."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)
