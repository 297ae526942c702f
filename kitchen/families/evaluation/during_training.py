"""Evaluation during training: the stages that run a config's `evals:` (`kitchen.engine.config.eval_schedule`)
inside a recipe's step loop, on the same task code `kitchen eval` runs.

After step `s` (every `every` steps and after the last), `StartEvals` snapshots the weights as a
sampling client (a snapshot on every backend: it keeps the weights it was made with while training
moves on) and starts each due eval on it. A background eval holds step `s`'s metrics row until
its `eval/<name>/<metric>` values are in, so rows stay in step order and every sink sees them
(the step's checkpoint record waits for the row too); training goes on meanwhile. At most one
run of each eval is in flight: a step whose eval is due while the previous run of it is still
going waits for that one. `FinishEvals`, after the loop, waits for the rest. Each run's graded
samples go to `RUN_DIR/evals/training/<name>/<NNNNNN>.jsonl` (NNNNNN: the completed steps, the
name of a checkpoint of the same weights).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kitchen.engine.config.eval_schedule import EVAL_PREFIX, EvalSchedule, TrainingEval
from kitchen.engine.config.sections import at, section_paths
from kitchen.engine.context import Context
from kitchen.engine.errors import DataError
from kitchen.engine.eval_tasks import EvalModel, TaskResult, get_task
from kitchen.engine.ports import SamplingClient, ServiceBackend, Tokenizer, TrainingClient
from kitchen.engine.renderers import get_renderer
from kitchen.engine.runs.datasets import is_hub_name
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import ConfigPredicate, When
from kitchen.families.common.settings import SamplingSettings
from kitchen.families.common.setup import renderer_name
from kitchen.families.evaluation.results import EVALS_DIR, sample_line
from kitchen.families.evaluation.target import sampler_opener
from train_core.renderers.base import Renderer

TRAINING_EVALS_DIR = "training"


def is_due(entry: TrainingEval, ctx: Context) -> bool:
    done = ctx.step + 1
    return done % entry.every == 0 or done == ctx.total_steps


evals_due = ConfigPredicate(
    "an eval task is due (every N steps and after the last)",
    EvalSchedule,
    lambda ctx, evals: any(is_due(entry, ctx) for entry in evals.tasks),
)
evals_configured = ConfigPredicate("eval.tasks is not empty", EvalSchedule, lambda ctx, evals: bool(evals.tasks))


@dataclass
class PendingEval:
    """One eval run in flight: which eval, after which step, and its asyncio task."""

    name: str
    step: int
    task: asyncio.Task[None]


@dataclass(frozen=True)
class EvalsInFlight:
    pending_evals: list[PendingEval]


def metric_values(name: str, result: TaskResult) -> dict[str, float]:
    """`eval/<name>/<metric>` for each of the task's metrics."""
    return {f"{EVAL_PREFIX}/{name}/{metric}": estimate.value for metric, estimate in result.metrics.items()}


def run_defaults(config: BaseModel) -> dict[str, Any]:
    """The run's own sampling settings (its `sampling` section, where it has one) that an eval
    inherits unless it sets its own: evaluate as the run samples."""
    paths = section_paths(type(config), SamplingSettings)
    if len(paths) != 1:
        return {}
    sampling = at(config, paths[0])
    return {"temperature": sampling.temperature, "max_tokens": sampling.max_tokens}


def _write_samples(run_dir: Path | None, name: str, step: int, result: TaskResult) -> None:
    if run_dir is None:
        return
    folder = run_dir / EVALS_DIR / TRAINING_EVALS_DIR / name
    folder.mkdir(parents=True, exist_ok=True)
    lines = "".join(sample_line(name, record) for record in result.samples)
    (folder / f"{step + 1:06d}.jsonl").write_text(lines, encoding="utf-8")


async def _evaluate(ctx: Context, entry: TrainingEval, model: EvalModel, step: int) -> None:
    """Run one eval on `model`, record its metrics under `step` and release the step's row."""
    try:
        settings = entry.task_settings(run_defaults(ctx.config))
        result = await get_task(entry.task).evaluate(model, settings)
        ctx.record(metric_values(entry.label, result), step=step)
        _write_samples(ctx.run_dir, entry.label, step, result)
        ctx.log.info(
            "eval.done",
            eval=entry.label,
            step=step,
            **{metric: round(estimate.value, 6) for metric, estimate in result.metrics.items()},
        )
    finally:
        ctx.metrics.release(step)


async def _settle(pending: Sequence[PendingEval], wait: bool) -> list[PendingEval]:
    """The evals still running (all finished, with `wait`); the first failure is raised."""
    if wait and pending:
        await asyncio.wait([p.task for p in pending])
    for entry in pending:
        if entry.task.done():
            entry.task.result()  # raises what the eval raised
    return [entry for entry in pending if not entry.task.done()]


class StartEvals(Stage):
    """Start the eval tasks due after this step on a snapshot of the weights (see the module doc)."""

    calls = (TrainingClient.save_weights_and_get_sampling_client, SamplingClient.sample)

    def check_inputs(self, config: Any) -> None:
        """Each eval's local data file exists (else the run would find out at its first eval)."""
        for index, entry in enumerate(config.eval.tasks):
            dataset = getattr(entry.task_settings(run_defaults(config)), "dataset", None)
            if isinstance(dataset, str) and not is_hub_name(dataset) and not Path(dataset).is_file():
                raise DataError(f"eval.tasks.{index} ({entry.label}): dataset {dataset}: no such file")

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        service: ServiceBackend,
        tokenizer: Tokenizer,
        evals: EvalSchedule,
        renderer: Renderer | None = None,
        pending_evals: list[PendingEval] | None = None,
    ) -> EvalsInFlight:
        pending = await _settle(pending_evals or [], wait=False)
        due = [entry for entry in evals.tasks if is_due(entry, ctx)]
        busy = [p for p in pending if p.name in {entry.label for entry in due}]
        if busy:
            ctx.log.info("eval.wait", evals=[p.name for p in busy], step=ctx.step)
            await _settle(busy, wait=True)
            pending = [p for p in pending if p not in busy]
        sampler = await training_client.save_weights_and_get_sampling_client()
        if renderer is None:
            renderer = get_renderer(renderer_name(ctx.config), tokenizer)
        model = EvalModel(
            sampler,
            renderer,
            tokenizer,
            f"step {ctx.step + 1}",
            sampler_opener(service),
            ctx.config.model_name,
            ctx.config.model_dump(mode="json"),
            service.get_tokenizer,
        )
        for entry in due:
            ctx.metrics.hold(ctx.step)
            task = asyncio.create_task(_evaluate(ctx, entry, model, ctx.step), name=f"eval {entry.label}")
            if entry.background:
                pending.append(PendingEval(entry.label, ctx.step, task))
            else:
                await task
        return EvalsInFlight(pending)


class FinishEvals(Stage):
    """Wait for the evals still running after the last step and write the rows they held (and
    the checkpoint records waiting for those rows), before the final checkpoint is saved."""

    calls = (SamplingClient.sample,)  # the background evals it waits for sample while it runs

    async def run(self, ctx: Context, pending_evals: list[PendingEval] | None = None) -> EvalsInFlight:
        await _settle(pending_evals or [], wait=True)
        ctx.metrics.flush(through=ctx.step)  # the held rows, and the checkpoint records after them
        return EvalsInFlight([])


def start_evals() -> When:
    """The step-loop node: after the step's update and checkpoint, start the evals due."""
    return When("evals", evals_due, [StartEvals()])


def finish_evals() -> When:
    """After the step loop, before the final checkpoint: wait for the evals still running."""
    return When("evals_left", evals_configured, [FinishEvals()])
