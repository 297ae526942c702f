"""Preference learning (DPO): load comparisons, freeze a reference, then pipelined DPO steps with
held-out evaluation and checkpoints."""

from __future__ import annotations

from collections.abc import Sequence

from kitchen.engine.context import Context
from kitchen.engine.workflow import ConfigPredicate, Node, When, Workflow
from kitchen.families.common.setup import (
    CloseBackend,
    CreateReferenceClient,
    CreateTrainingClient,
    GetTokenizer,
    MakeRenderer,
)
from kitchen.families.common.train_loop import pipelined_training
from kitchen.families.common.training import CollectTrainStep, loss_fn_metrics
from kitchen.families.preference.judges import ProvideJudge
from kitchen.families.preference.settings import DPOLoss
from kitchen.families.preference.stages import (
    ComputeDPOReferenceLogprobs,
    EvaluatePreferences,
    EvaluateWinRate,
    GetPreferenceBatch,
    Judge,
    LoadPreferenceData,
    SubmitDPOStep,
    SyncReferenceModel,
)


def _sync_due(ctx: Context, dpo: DPOLoss) -> bool:
    """TRL's rule: after the optimizer step that makes the step count a multiple of the period."""
    period = dpo.reference_sync_steps
    return period > 0 and (ctx.step + 1) % period == 0


def reference_sync(name: str = "sync_reference") -> When:
    """TR-DPO's reference update every `dpo.ref_model_sync_steps` steps (with `dpo.sync_ref_model`),
    once the step's update is applied, so the next step scores against the synced reference."""
    return When(
        name,
        ConfigPredicate("every dpo.ref_model_sync_steps steps, with dpo.sync_ref_model", DPOLoss, _sync_due),
        [CollectTrainStep(keep=0, name=f"await_before_{name}", step_metrics=loss_fn_metrics), SyncReferenceModel()],
    )


def preference_workflow(judge: Judge | None = None, judge_setup: Sequence[Node] = ()) -> Workflow:
    """The DPO workflow; with a `judge` (or `judge_setup` stages that open one as `judge` once the
    clients exist: a learned preference model, `OpenModelJudge`), each evaluation also measures
    the policy's win rate against the reference model.

    Step i's reference logprobs are computed while step i-1 trains (one step stays in flight),
    and every evaluation and checkpoint sees the weights after the current step. With
    `dpo.sync_ref_model` the reference follows the policy (TR-DPO, `reference_sync`); the held-out
    metrics stay against the initial reference.
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
            ComputeDPOReferenceLogprobs(
                "score_held_out_reference",
                keys={"batch": "eval_data", "batch_reference_logprobs": "eval_reference_logprobs"},
            ),
            *pipelined_training(
                [GetPreferenceBatch(), ComputeDPOReferenceLogprobs(), SubmitDPOStep()],
                evaluators,
                loss_fn_metrics,
                after_step=[reference_sync()],
            ),
        ],
        finally_=[CloseBackend()],
    )
