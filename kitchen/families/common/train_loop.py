"""The step loop every pipelined trainer shares (supervised, DPO, KTO, reward model): one step
kept in flight while the next is prepared, evaluations and checkpoints on the weights after the
current step, evaluation during training (`eval.tasks`), then the last step awaited and the final
checkpoint. Only the stages that make and submit a step, and the evaluators, differ."""

from __future__ import annotations

from collections.abc import Sequence

from kitchen.engine.workflow import Loop, Node, When, every
from kitchen.families.common.checkpoint import CheckpointSettings, SaveCheckpoint
from kitchen.families.common.settings import HeldOutEval
from kitchen.families.common.training import CollectTrainStep, StepMetrics, supervised_step_metrics
from kitchen.families.evaluation.during_training import finish_evals, start_evals


def pipelined_training(
    step: Sequence[Node],
    evaluators: Sequence[Node],
    step_metrics: StepMetrics = supervised_step_metrics,
    after_step: Sequence[Node] = (),
) -> list[Node]:
    """The workflow's steps from the loop on: `step` makes and submits each step's update;
    `after_step` nodes run next, before the evaluations and checkpoints (a `When` there that
    needs the step's update applied awaits it first: `CollectTrainStep(keep=0, ...)`);
    `evaluators` run every `eval.every` steps and at the last."""
    return [
        Loop(
            "train",
            over="num_steps",
            step=True,
            body=[
                *step,
                CollectTrainStep(keep=1, step_metrics=step_metrics),
                *after_step,
                When("eval", every(HeldOutEval, lambda e: e.every, include_last=True), list(evaluators)),
                When(
                    "checkpoint",
                    every(CheckpointSettings, lambda c: c.save_every),
                    [
                        CollectTrainStep(keep=0, name="await_before_checkpoint", step_metrics=step_metrics),
                        SaveCheckpoint(),
                    ],
                ),
                start_evals(),
            ],
        ),
        CollectTrainStep(keep=0, name="await_last_step", step_metrics=step_metrics),
        finish_evals(),
        SaveCheckpoint(final=True),
    ]
