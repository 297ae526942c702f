"""Supervised fine-tuning: load data, then pipelined train steps with eval and checkpoints."""

from __future__ import annotations

from collections.abc import Sequence

from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Node, Workflow
from kitchen.families.common.setup import CloseBackend, CreateTrainingClient, GetTokenizer, MakeRenderer
from kitchen.families.common.train_loop import pipelined_training
from kitchen.families.common.training import SubmitTrainStep
from kitchen.families.supervised.examples import ExampleBuilder
from kitchen.families.supervised.stages import (
    EvaluateNLL,
    GetSupervisedBatch,
    LoadChatData,
    LoadGeneratedChatData,
    LoadSupervisedData,
)


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
    config's `data.dataset` (and is rendered by the chat renderer); `before_training` stages run once
    the training client exists; `evaluators` run with the held-out NLL (every `eval.every` steps and at the last)."""
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
            *pipelined_training([GetSupervisedBatch(), SubmitTrainStep()], [EvaluateNLL(), *evaluators]),
        ],
        finally_=[CloseBackend()],
    )
