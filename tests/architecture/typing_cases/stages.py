"""Stages that mypy must judge (`test_stage_typing`): each line marked with an error comment must be reported
with that error code, and no other line may be. Never imported by the suite."""

from __future__ import annotations

from dataclasses import dataclass

from kitchen import Context, Stage
from kitchen.families.common.settings import OptimizerSettings
from train_core.types import Datum


@dataclass(frozen=True)
class Batch:
    batch: list[Datum]


@dataclass(frozen=True)
class Count:
    num_examples: int


class Good(Stage):
    async def run(self, ctx: Context, batch: list[Datum], config: OptimizerSettings) -> Count:
        ctx.record({"lr": config.learning_rate})
        return Count(len(batch))


class WrongTypeForKey(Stage):
    async def run(self, batch: list[Datum]) -> Count:
        return Count(str(len(batch)))  # error: arg-type


class WrongOutput(Stage):
    async def run(self, batch: list[Datum]) -> Count:
        return Batch(batch)  # error: return-value


class UndeclaredSetting(Stage):
    async def run(self, ctx: Context, config: OptimizerSettings) -> None:
        ctx.record({"beta": config.dpo_beta})  # error: attr-defined


class MisusedRead(Stage):
    async def run(self, batch: list[Datum]) -> Count:
        return Count(batch.length)  # error: attr-defined
