"""Supervised fine-tuning: load data, then pipelined train steps with eval and checkpoints."""

from __future__ import annotations

from collections.abc import Sequence

from kitchen.stages.checkpoint import SaveCheckpoint
from kitchen.stages.setup import CloseBackend, CreateTrainingClient, GetTokenizer, MakeRenderer
from kitchen.stages.training import CollectTrainStep, SubmitTrainStep
from kitchen.supervised.examples import ExampleBuilder
from kitchen.supervised.stages import EvaluateNLL, GetSupervisedBatch, LoadSupervisedData
from kitchen.workflow import Loop, Node, When, Workflow, every


def supervised_workflow(
    builder: ExampleBuilder,
    needs_renderer: bool = False,
    name: str = "supervised",
    prepare_data: Sequence[Node] = (),
    files_key: str | None = None,
    before_training: Sequence[Node] = (),
    evaluators: Sequence[Node] = (),
) -> Workflow:
    """Pipelined cross-entropy steps over a data set, with held-out NLL and checkpoints.

    Slots: `prepare_data` stages run before the data is loaded (e.g. writing it: a teacher's
    answers), and then the data comes from the files they put under `files_key` instead of the
    config's `dataset`; `before_training` stages run once the training client exists;
    `evaluators` run with the held-out NLL (every `eval_every` steps and at the last)."""
    return Workflow(
        name=name,
        steps=[
            GetTokenizer(),
            *([MakeRenderer()] if needs_renderer else []),
            *prepare_data,
            LoadSupervisedData(builder, needs_renderer=needs_renderer, files_key=files_key),
            CreateTrainingClient(),
            *before_training,
            Loop(
                "train",
                over="num_steps",
                step=True,
                body=[
                    GetSupervisedBatch(),
                    SubmitTrainStep(),
                    CollectTrainStep(keep=1),
                    When("eval", every("eval_every", include_last=True), [EvaluateNLL(), *evaluators]),
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
