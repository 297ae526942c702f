"""The sampler pool's full garbage collections are rationed (`CollectionBudget`): a server keeps
its sampling clients, so a collection there frees nothing and only stops every thread."""

from __future__ import annotations

import gc

import pytest

from adapters.local.sampler_pool import CollectionBudget


def test_a_collection_waits_ten_times_the_last_ones_duration(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[int] = []

    def collect() -> int:
        ran.append(1)
        return 0

    monkeypatch.setattr(gc, "collect", collect)
    now = [100.0]
    ticks = iter([0.0, 2.0])  # the first collection takes 2 s: start, end

    def clock() -> float:
        return now[0] + next(ticks, 0.0)

    budget = CollectionBudget(ratio=10.0, clock=clock)
    assert budget.collect() and budget.collections == 1  # the first one always runs
    now[0] = 102.0 + 19.0  # 19 s after it ended: < 10 x 2 s
    assert not budget.collect() and budget.collections == 1 and len(ran) == 1
    now[0] = 102.0 + 20.5
    assert budget.collect() and budget.collections == 2 and len(ran) == 2
