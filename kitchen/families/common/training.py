"""Train steps: AdamW settings of the step, pipelined submit/collect (step i+1 is submitted
before step i is awaited, as the Tinker SL loop does, so the backend never idles between steps),
pipelined substeps, and the guard against NaN/inf steps."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kitchen.engine.config.run import RunConfig
from kitchen.engine.context import Context
from kitchen.engine.errors import StageError
from kitchen.engine.ports import CustomLossFn, TrainingClient
from kitchen.engine.stage import Stage
from kitchen.families.common.settings import OptimizerSettings
from train_core.schedules import lr_multiplier
from train_core.supervised import mean_nll
from train_core.types import AdamParams, Datum, ForwardBackwardOutput, OptimStepOutput

if TYPE_CHECKING:
    import torch


def adam_params(ctx: Context, optimizer: OptimizerSettings) -> AdamParams:
    """AdamW settings of the current step, with the section's LR schedule applied."""
    multiplier = lr_multiplier(optimizer.lr_schedule, ctx.step, ctx.total_steps or 1, optimizer.warmup_steps)
    return AdamParams(
        learning_rate=optimizer.learning_rate * multiplier,
        beta1=optimizer.adam_beta1,
        beta2=optimizer.adam_beta2,
        eps=optimizer.adam_eps,
        weight_decay=optimizer.weight_decay,
        grad_clip_norm=optimizer.grad_clip_norm,
    )


@dataclass
class PendingStep:
    step: int
    batch: list[Datum]
    learning_rate: float
    forward_backward: Awaitable[ForwardBackwardOutput]
    optim: Awaitable[OptimStepOutput]
    submitted_at: float


@dataclass(frozen=True)
class InFlight:
    inflight: list[PendingStep]


async def submit_step(
    ctx: Context,
    client: TrainingClient,
    batch: list[Datum],
    loss: str | CustomLossFn,
    optimizer: OptimizerSettings,
    inflight: Sequence[PendingStep],
) -> InFlight:
    """One step's update, submitted and not awaited: forward_backward with a built-in loss (by
    name) or forward_backward_custom with a custom one, then optim_step with the `optimizer`
    section's AdamW at this step's scheduled learning rate; `inflight` with it added (its metrics
    row waits until it is collected)."""
    params = adam_params(ctx, optimizer)
    if isinstance(loss, str):
        fb = await client.forward_backward(batch, loss)
    else:
        fb = await client.forward_backward_custom(batch, loss)
    optim = await client.optim_step(params)
    ctx.metrics.hold(ctx.step)
    pending = PendingStep(ctx.step, batch, params.learning_rate, fb, optim, time.perf_counter())
    return InFlight([*inflight, pending])


class SubmitTrainStep(Stage):
    """Submit forward_backward(cross_entropy) and optim_step for the batch; do not wait."""

    calls = (TrainingClient.forward_backward, TrainingClient.optim_step)

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        batch: list[Datum],
        optimizer: OptimizerSettings,
        inflight: Sequence[PendingStep] = (),
    ) -> InFlight:
        return await submit_step(ctx, training_client, batch, "cross_entropy", optimizer, inflight)


async def forward_logprobs(
    client: TrainingClient, data: Sequence[Datum], chunk: int
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Held-out evaluation's forward pass (no gradients) of `data` in chunks of `chunk` datums,
    every chunk queued before any is awaited (so it runs after the step's update already queued):
    each datum's per-token logprobs and its loss weights."""
    futures = [await client.forward(data[i : i + chunk], "cross_entropy") for i in range(0, len(data), chunk)]
    logprobs_D = [out["logprobs"].to_torch() for fut in futures for out in (await fut).loss_fn_outputs]
    weights_D = [datum.loss_fn_inputs["weights"].to_torch() for datum in data]
    return logprobs_D, weights_D


def supervised_step_metrics(pending: PendingStep, output: ForwardBackwardOutput) -> dict[str, float]:
    """Mean NLL and token counts of a cross-entropy step, from the returned logprobs."""
    import torch

    logprobs_D = [out["logprobs"].to_torch() for out in output.loss_fn_outputs]
    weights_D = [datum.loss_fn_inputs["weights"].to_torch() for datum in pending.batch]
    return {
        "train_mean_nll": mean_nll(logprobs_D, weights_D),
        "num_sequences": len(pending.batch),
        "num_tokens": sum(int(w.numel()) for w in weights_D),
        "num_loss_tokens": float(sum(torch.count_nonzero(w).item() for w in weights_D)),
    }


def loss_fn_metrics(pending: PendingStep, output: ForwardBackwardOutput) -> dict[str, float]:
    """The metrics the loss function reported (e.g. a custom loss's `dpo_loss`, `accuracy`)."""
    return dict(output.metrics)


StepMetrics = Callable[[PendingStep, ForwardBackwardOutput], dict[str, float]]


class CollectTrainStep(Stage):
    """Await submitted steps, oldest first, until at most `keep` remain in flight, and record
    each under its own step: `step_metrics` of its output, the learning rate and the optimizer's."""

    def __init__(self, keep: int = 1, name: str | None = None, step_metrics: StepMetrics = supervised_step_metrics):
        super().__init__(name)
        self.keep = keep
        self.step_metrics = step_metrics

    async def run(self, ctx: Context, inflight: list[PendingStep], config: RunConfig) -> InFlight:
        waiting = list(inflight)
        while len(waiting) > self.keep:
            pending = waiting.pop(0)
            fb_out = await pending.forward_backward
            optim_out = await pending.optim
            ctx.record(
                {
                    **self.step_metrics(pending, fb_out),
                    "learning_rate": pending.learning_rate,
                    "time/step_latency": time.perf_counter() - pending.submitted_at,
                    **{f"optim/{k}": v for k, v in optim_out.metrics.items()},
                },
                step=pending.step,
            )
            ctx.metrics.release(pending.step)
            guard_nonfinite(ctx, pending.step, config.max_bad_steps, [optim_out], [fb_out])
        return InFlight(waiting)


NONFINITE_KEY = "nonfinite_step"
"""Optimizer metric a backend sets to 1 when it did not apply a step whose loss or gradient norm
was NaN/inf."""

_LOSS_KEYS = ("loss:sum", "loss", "train_mean_nll", "dpo_loss")


def step_is_nonfinite(optim_outputs: Iterable[OptimStepOutput], fb_outputs: Iterable[ForwardBackwardOutput]) -> bool:
    """Whether a backend skipped the step as non-finite, or a loss metric came back NaN/inf."""
    for optim in optim_outputs:
        if optim.metrics.get(NONFINITE_KEY) or not math.isfinite(float(optim.metrics.get("grad_norm", 0.0))):
            return True
    for fb in fb_outputs:
        for key in _LOSS_KEYS:
            value = fb.metrics.get(key)
            if isinstance(value, (int, float)) and not math.isfinite(value):
                return True
    return False


def guard_nonfinite(
    ctx: Context,
    step: int,
    max_bad_steps: int,
    optim_outputs: Iterable[OptimStepOutput],
    fb_outputs: Iterable[ForwardBackwardOutput] = (),
) -> None:
    """Count consecutive steps whose loss or gradient norm was NaN/inf (their update is not applied
    by the local and noop backends); more than `max_bad_steps` in a row stops the run (exit 2),
    leaving the last good checkpoint as the resume point."""
    if not step_is_nonfinite(list(optim_outputs), list(fb_outputs)):
        ctx.bad_steps = 0
        return
    ctx.bad_steps += 1
    ctx.record({"optim/nonfinite_step": 1.0}, step=step)
    limit = max_bad_steps
    ctx.log.warning("train_step.nonfinite", step=step + 1, consecutive=ctx.bad_steps, max_bad_steps=limit)
    if ctx.bad_steps > limit:
        raise StageError(
            f"step {step + 1}: the loss or gradient norm is NaN/inf ({ctx.bad_steps} step(s) in a row, "
            f"max_bad_steps={limit}); the update was not applied and the run stops here; the last "
            "checkpoint in checkpoints.jsonl is the resume point (lower optimizer.learning_rate or check the data)"
        )


_Submitted = tuple[Awaitable[ForwardBackwardOutput], Awaitable[OptimStepOutput]]
SubmitForwardBackward = Callable[[Sequence[Datum]], Awaitable[Awaitable[ForwardBackwardOutput]]]
"""Submits one chunk's forward_backward (a built-in loss, or a custom one) and returns its future."""


async def train_in_chunks(
    client: TrainingClient,
    chunks: Sequence[Sequence[Datum]],
    loss_fn: str,
    loss_fn_config: dict[str, float] | None,
    adam: AdamParams,
    on_result: Callable[[int, tuple[ForwardBackwardOutput, OptimStepOutput]], None] | None = None,
) -> list[tuple[ForwardBackwardOutput, OptimStepOutput]]:
    """One optimizer step per chunk with the built-in `loss_fn` (see `pipelined_steps`)."""

    async def forward_backward(chunk: Sequence[Datum]) -> Awaitable[ForwardBackwardOutput]:
        return await client.forward_backward(chunk, loss_fn, loss_fn_config)

    return await pipelined_steps(client, chunks, forward_backward, adam, on_result)


async def pipelined_steps(
    client: TrainingClient,
    chunks: Sequence[Sequence[Datum]],
    forward_backward: SubmitForwardBackward,
    adam: AdamParams,
    on_result: Callable[[int, tuple[ForwardBackwardOutput, OptimStepOutput]], None] | None = None,
    on_forward_backward: Callable[[list[ForwardBackwardOutput]], None] | None = None,
) -> list[tuple[ForwardBackwardOutput, OptimStepOutput]]:
    """One optimizer step per chunk, in order; the results of every chunk (each also given to
    `on_result(index, result)` as it arrives, e.g. for progress).

    Each chunk's forward_backward + optim_step pair is submitted before the previous one's results
    are awaited, so the backend never waits for the client between substeps (requests run in
    submission order). `on_forward_backward` gets every chunk's forward_backward output as soon
    as the last one arrives, before the last optimizer step is awaited: the client's work on them
    (metrics) runs while the backend takes that step."""

    async def submit(chunk: Sequence[Datum]) -> _Submitted:
        return await forward_backward(chunk), await client.optim_step(adam)

    if not chunks:
        return []
    submitted = [await submit(chunks[0])]
    results: list[tuple[ForwardBackwardOutput, OptimStepOutput]] = []
    for index in range(len(chunks)):
        if index + 1 < len(chunks):
            submitted.append(await submit(chunks[index + 1]))
        fb, optim = submitted.pop(0)
        fb_output = await fb
        if on_forward_backward is not None and index + 1 == len(chunks):
            on_forward_backward([*(result for result, _ in results), fb_output])
        results.append((fb_output, await optim))
        if on_result is not None:
            on_result(index, results[-1])
    return results
