"""Preference learning (DPO): load comparisons, freeze a reference, then pipelined DPO steps with
held-out evaluation and checkpoints."""

from __future__ import annotations

from collections.abc import Sequence

from kitchen.engine.workflow import Node, Workflow
from kitchen.families.common.setup import (
    CloseBackend,
    CreateReferenceClient,
    CreateTrainingClient,
    GetTokenizer,
    MakeRenderer,
)
from kitchen.families.common.train_loop import pipelined_training
from kitchen.families.common.training import loss_fn_metrics
from kitchen.families.preference.judges import ProvideJudge
from kitchen.families.preference.stages import (
    ComputeReferenceLogprobs,
    EvaluatePreferences,
    EvaluateWinRate,
    GetPreferenceBatch,
    Judge,
    LoadPreferenceData,
    SubmitDPOStep,
)


def preference_workflow(judge: Judge | None = None, judge_setup: Sequence[Node] = ()) -> Workflow:
    """The DPO workflow; with a `judge` (or `judge_setup` stages that open one as `judge` once the
    clients exist: a learned preference model, `OpenModelJudge`), each evaluation also measures
    the policy's win rate against the reference model.

    Step i's reference logprobs are computed while step i-1 trains (one step stays in flight),
    and every evaluation and checkpoint sees the weights after the current step.
    """
    if judge is not None:
        judge_setup = [*judge_setup, ProvideJudge(judge)]
    evaluators = [EvaluatePreferences(), *([EvaluateWinRate()] if judge_setup else [])]
    return Workflow(
        name="preference",
        steps=[
            GetTokenizer(),
            MakeRenderer(),
            LoadPreferenceData(),
            CreateTrainingClient(),
            CreateReferenceClient(),
            *judge_setup,
            ComputeReferenceLogprobs(
                "score_held_out_reference",
                keys={"batch": "eval_data", "batch_reference_logprobs": "eval_reference_logprobs"},
            ),
            *pipelined_training(
                [GetPreferenceBatch(), ComputeReferenceLogprobs(), SubmitDPOStep()], evaluators, loss_fn_metrics
            ),
        ],
        finally_=[CloseBackend()],
    )
