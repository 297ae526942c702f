"""Train steps: AdamW settings of the step, and pipelined submit/collect (step i+1 is submitted
before step i is awaited, as the Tinker SL loop does, so the backend never idles between steps)."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kitchen.context import Context
from kitchen.errors import StageError
from kitchen.settings import ADAM_KEYS
from kitchen.stage import Stage
from train_core.schedules import lr_multiplier
from train_core.supervised import mean_nll
from train_core.types import AdamParams, Datum, ForwardBackwardOutput, OptimStepOutput

if TYPE_CHECKING:
    pass


def adam_params(ctx: Context) -> AdamParams:
    """AdamW settings of the current step, with the config's LR schedule applied. A stage that
    calls this declares `kitchen.settings.ADAM_KEYS` among its `config_keys`."""
    config = ctx.config
    multiplier = lr_multiplier(config.lr_schedule, ctx.step, ctx.total_steps or 1, config.warmup_steps)
    return AdamParams(
        learning_rate=config.learning_rate * multiplier,
        beta1=config.adam_beta1,
        beta2=config.adam_beta2,
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
        grad_clip_norm=config.grad_clip_norm,
    )


@dataclass
class PendingStep:
    step: int
    batch: list[Datum]
    learning_rate: float
    forward_backward: Awaitable[ForwardBackwardOutput]
    optim: Awaitable[OptimStepOutput]
    submitted_at: float


def put_in_flight(
    ctx: Context,
    params: AdamParams,
    forward_backward: Awaitable[ForwardBackwardOutput],
    optim: Awaitable[OptimStepOutput],
) -> None:
    """Track a submitted step in `inflight`; its metrics row waits until it is collected."""
    ctx.metrics.hold(ctx.step)
    pending = PendingStep(ctx.step, ctx["batch"], params.learning_rate, forward_backward, optim, time.perf_counter())
    ctx["inflight"] = [*(ctx.get("inflight") or []), pending]


class SubmitTrainStep(Stage):
    """Submit forward_backward(cross_entropy) and optim_step for the batch; do not wait."""

    reads = ("training_client", "batch")
    writes = ("inflight",)
    calls = ("TrainingClient.forward_backward", "TrainingClient.optim_step")
    config_keys = ADAM_KEYS

    async def run(self, ctx: Context) -> None:
        client = ctx["training_client"]
        params = adam_params(ctx)
        fb = await client.forward_backward(ctx["batch"], "cross_entropy")
        put_in_flight(ctx, params, fb, await client.optim_step(params))


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

    reads = ("inflight",)
    writes = ("inflight",)
    config_keys = ("max_bad_steps",)

    def __init__(self, keep: int = 1, name: str | None = None, step_metrics: StepMetrics = supervised_step_metrics):
        super().__init__(name)
        self.keep = keep
        self.step_metrics = step_metrics

    async def run(self, ctx: Context) -> None:
        inflight: list[PendingStep] = list(ctx["inflight"])
        while len(inflight) > self.keep:
            pending = inflight.pop(0)
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
            ctx["inflight"] = inflight
            guard_nonfinite(ctx, pending.step, [optim_out], [fb_out])
        ctx["inflight"] = inflight


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
    optim_outputs: Iterable[OptimStepOutput],
    fb_outputs: Iterable[ForwardBackwardOutput] = (),
) -> None:
    """Count consecutive steps whose loss or gradient norm was NaN/inf (their update is not applied
    by the local and noop backends); more than `max_bad_steps` in a row stops the run (exit 2),
    leaving the last good checkpoint as the resume point. The calling stage declares
    `max_bad_steps` in its `config_keys`."""
    if not step_is_nonfinite(list(optim_outputs), list(fb_outputs)):
        ctx.bad_steps = 0
        return
    ctx.bad_steps += 1
    ctx.record({"optim/nonfinite_step": 1.0}, step=step)
    limit = int(ctx.config.max_bad_steps)
    ctx.log.warning("train_step.nonfinite", step=step + 1, consecutive=ctx.bad_steps, max_bad_steps=limit)
    if ctx.bad_steps > limit:
        raise StageError(
            f"step {step + 1}: the loss or gradient norm is NaN/inf ({ctx.bad_steps} step(s) in a row, "
            f"max_bad_steps={limit}); the update was not applied and the run stops here; the last "
            "checkpoint in checkpoints.jsonl is the resume point (lower learning_rate or check the data)"
        )
