"""Supervised fine-tuning: load data, then pipelined train steps with eval and checkpoints."""

from __future__ import annotations

from collections.abc import Sequence

from kitchen.eval.training import finish_evals, start_evals
from kitchen.stage import Stage
from kitchen.stages.checkpoint import SaveCheckpoint
from kitchen.stages.setup import CloseBackend, CreateTrainingClient, GetTokenizer, MakeRenderer
from kitchen.stages.training import CollectTrainStep, SubmitTrainStep
from kitchen.supervised.examples import ExampleBuilder
from kitchen.supervised.stages import (
    EvaluateNLL,
    GetSupervisedBatch,
    LoadChatData,
    LoadGeneratedChatData,
    LoadSupervisedData,
)
from kitchen.workflow import Loop, Node, When, Workflow, every


def supervised_workflow(
    builder: ExampleBuilder,
    needs_renderer: bool = False,
    name: str = "supervised",
    prepare_data: Sequence[Node] = (),
    before_training: Sequence[Node] = (),
    evaluators: Sequence[Node] = (),
) -> Workflow:
    """Pipelined cross-entropy steps over a data set, with held-out NLL and checkpoints.

    Slots: `prepare_data` stages run before the data is loaded and write it (e.g. a teacher's
    answers): the data then comes from the files they put under `data_files` instead of the
    config's `dataset` (and is rendered by the chat renderer); `before_training` stages run once
    the training client exists; `evaluators` run with the held-out NLL (every `eval_every` steps and at the last)."""
    load: Stage
    if prepare_data:
        load = LoadGeneratedChatData(builder)
    else:
        load = LoadChatData(builder) if needs_renderer else LoadSupervisedData(builder)
    return Workflow(
        name=name,
        steps=[
            GetTokenizer(),
            *([MakeRenderer()] if needs_renderer or prepare_data else []),
            *prepare_data,
            load,
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
                    start_evals(),
                ],
            ),
            CollectTrainStep(keep=0, name="await_last_step"),
            finish_evals(),
            SaveCheckpoint(final=True),
        ],
        finally_=[CloseBackend()],
    )
