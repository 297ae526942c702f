"""Suite-wide settings: tests check behaviour, not speed, so torch runs single-threaded (no
OpenMP oversubscription when the machine is busy) and hypothesis examples have no deadline (a
loaded machine must not fail a property); benchmarks measure speed separately."""

from __future__ import annotations

import os
import tempfile

import torch
from hypothesis import settings

torch.set_num_threads(1)
settings.register_profile("kitchen", deadline=None)
settings.load_profile("kitchen")

# The record cache (kitchen.record_cache) of this test session goes under the session's temp dir,
# not the user's ~/.cache: set before any test reads data, inherited by CLI subprocesses.
if "KITCHEN_CACHE_DIR" not in os.environ:
    os.environ["KITCHEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kitchen-test-cache-")
