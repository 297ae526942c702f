"""Supervised fine-tuning: load data, then pipelined train steps with eval and checkpoints."""

from __future__ import annotations

from kitchen.stages.checkpoint import SaveCheckpoint
from kitchen.stages.setup import CloseBackend, CreateTrainingClient, GetTokenizer, MakeRenderer
from kitchen.stages.training import CollectTrainStep, SubmitTrainStep
from kitchen.supervised.examples import ExampleBuilder
from kitchen.supervised.stages import EvaluateNLL, GetSupervisedBatch, LoadSupervisedData
from kitchen.workflow import Loop, When, Workflow, every


def supervised_workflow(builder: ExampleBuilder, needs_renderer: bool = False) -> Workflow:
    return Workflow(
        name="supervised",
        steps=[
            GetTokenizer(),
            *([MakeRenderer()] if needs_renderer else []),
            LoadSupervisedData(builder, needs_renderer=needs_renderer),
            CreateTrainingClient(),
            Loop(
                "train",
                over="num_steps",
                step=True,
                body=[
                    GetSupervisedBatch(),
                    SubmitTrainStep(),
                    CollectTrainStep(keep=1),
                    When("eval", every("eval_every", include_last=True), [EvaluateNLL()]),
                    When(
                        "checkpoint",
                        every("save_every"),
                        [CollectTrainStep(keep=0, name="await_before_checkpoint"), SaveCheckpoint()],
                    ),
                ],
            ),
            CollectTrainStep(keep=0, name="await_last_step"),
            SaveCheckpoint(final=True),
        ],
        finally_=[CloseBackend()],
    )
