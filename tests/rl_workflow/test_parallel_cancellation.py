"""A failing Parallel branch cancels its siblings: a producer that only stops when told must not
outlive the run (the async RL workflow's sampling workers are such a branch)."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from kitchen.engine.context import Context
from kitchen.engine.runner import Runner, StageFailure
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Parallel, Workflow


class _Config(BaseModel):
    pass


class WaitForever(Stage):
    """Blocks until cancelled, and notes that it was."""

    def __init__(self, seen: list[str]) -> None:
        super().__init__()
        self.seen = seen

    async def run(self, ctx: Context) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.seen.append("cancelled")
            raise


class Note(Stage):
    def __init__(self, seen: list[str]) -> None:
        super().__init__()
        self.seen = seen

    async def run(self, ctx: Context) -> None:
        self.seen.append("finally")


class FailSoon(Stage):
    async def run(self, ctx: Context) -> None:
        await asyncio.sleep(0.01)
        raise RuntimeError("consumer broke")


def test_failure_in_one_branch_cancels_the_other_before_finally() -> None:
    seen: list[str] = []
    workflow = Workflow("w", [Parallel("p", [[WaitForever(seen)], [FailSoon()]])], finally_=[Note(seen)])
    ctx = Context(_Config(), ports={})

    async def run_with_deadline() -> None:
        await asyncio.wait_for(Runner(workflow).run(ctx), timeout=5)

    with pytest.raises(StageFailure, match="consumer broke"):
        asyncio.run(run_with_deadline())
    assert seen == ["cancelled", "finally"]
