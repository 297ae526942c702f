"""The sampler pool's full garbage collections are rationed when futile (`CollectionBudget`): a
server keeps its sampling clients, so a collection there frees nothing and only stops every
thread; where dropped clients are freed by it, it runs whenever a pool needs one."""

from __future__ import annotations

import gc
import weakref

import pytest

from adapters.local.sampler_pool import CollectionBudget


def test_after_a_futile_collection_the_next_waits_ratio_times_its_duration(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[int] = []

    def collect() -> int:
        ran.append(1)
        now[0] += 2.0  # a collection takes 2 s
        return 0

    monkeypatch.setattr(gc, "collect", collect)
    now = [100.0]
    budget = CollectionBudget(ratio=10.0, clock=lambda: now[0])
    assert budget.collect(lambda: None) is None and len(ran) == 1  # ran, freed nothing (ends at 102)
    now[0] = 102.0 + 19.0  # 19 s later: < 10 x 2 s
    assert budget.collect(lambda: "freed") is None and len(ran) == 1  # not run
    now[0] = 102.0 + 20.5
    assert budget.collect(lambda: "freed") == "freed" and len(ran) == 2
    # a useful collection rations nothing: the next runs at once
    assert budget.collect(lambda: None) is None and len(ran) == 3
    assert budget.collections == 3


def test_a_real_collection_frees_a_model_caught_in_a_cycle() -> None:
    class Holder:
        def __init__(self) -> None:
            self.cycle = self

    holder = Holder()
    ref = weakref.ref(holder)
    del holder
    found = CollectionBudget().collect(lambda: "freed" if ref() is None else None)
    assert found == "freed"
