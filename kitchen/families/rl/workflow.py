"""Reinforcement learning (GRPO-style): sample env groups, centre rewards within each group,
train a policy-gradient loss, refresh the sampler (and, with `post_update_kl`, score the step's
tokens with it: `optim/kl_pre_post`); in one of three modes, built from the same
stages.

- sync: roll out the whole batch with the current weights, then run the update on it.
- stream_minibatch: run the update on each minibatch as soon as its groups finish sampling.
- async: sampling workers and the trainer run concurrently (a Parallel node); workers start only
  groups the trainer can consume within `max_steps_off_policy` steps (admission control).

The `algorithm` section's keys enter as stages and settings: dynamic sampling adds
`FillInformativeBatch` in sync mode (stream and async fill as they take groups), a KL term in the
loss a reference client and `AddReferenceLogprobs`; the estimator, overlong handling, aggregation,
clip keys, entropy bonus and corrections are read by the advantage, assembly and update stages.

Variants fill slots instead of adding flags: `setup` stages run once before RL (a warm start, a
reference or teacher model), `adjust` stages rewrite the assembled datums' advantages before the
train step (a KL penalty, a teacher's KL), `after_update` stages run after each step's update,
`evaluators` run with the held-out reward (before the step's update), `after_training` stages
once after the last update (e.g. a final evaluation of the trained policy), and `update`, where
given, replaces advantages, assembly, `adjust` and the policy-gradient step with an update of
another kind on the sampled groups (self-distillation's; sync and async modes). The config's
`eval.tasks` run after each step's update and checkpoint (`kitchen.families.evaluation.during_training`).
"""

from __future__ import annotations

from collections.abc import Sequence

from kitchen.engine.context import Context
from kitchen.engine.workflow import Loop, Node, Parallel, When, Workflow, WorkflowBuilder, every
from kitchen.families.common.checkpoint import CheckpointSettings, SaveCheckpoint
from kitchen.families.common.settings import HeldOutEval
from kitchen.families.common.setup import (
    CloseBackend,
    CreateReferenceClient,
    CreateTrainingClient,
    GetTokenizer,
    MakeRenderer,
)
from kitchen.families.evaluation.during_training import finish_evals, start_evals
from kitchen.families.rl.algorithm_settings import AlgorithmSettings
from kitchen.families.rl.async_mode import (
    CreateOffPolicyQueue,
    PublishSampler,
    RolloutWorkers,
    StopRolloutWorkers,
    TakeFreshGroups,
)
from kitchen.families.rl.dynamic_sampling import FillInformativeBatch
from kitchen.families.rl.evaluation import EvaluateRewards
from kitchen.families.rl.settings import RLLoopSettings, RLMode, RLSettings, WarmStartSettings
from kitchen.families.rl.setup import BuildRLTask, OpenTaskModels, WarmStart
from kitchen.families.rl.step import (
    AddReferenceLogprobs,
    ApplyKLPenalty,
    AssembleData,
    ComputeAdvantages,
    DoRollouts,
    GetEnvGroups,
    PlanUpdate,
    PostUpdateKL,
    RecordRolloutMetrics,
    RefreshSampler,
    RLTrainStep,
    WriteTranscripts,
    post_update_kl_on,
)
from kitchen.families.rl.stream import FinishStreamStep, StartRollouts, SubmitMinibatch, TakeMinibatch
from train_core.rl.task import DataCheck, RLTaskFactory


def fresh_run(ctx: Context) -> bool:
    return ctx.resume is None


fresh_run.__name__ = "fresh run (not resumed)"


def rl_workflow(
    factory: RLTaskFactory,
    mode: RLMode = "sync",
    setup: Sequence[Node] = (),
    adjust: Sequence[Node] = (),
    after_update: Sequence[Node] = (),
    evaluators: Sequence[Node] = (),
    after_training: Sequence[Node] = (),
    check_data: DataCheck | None = None,
    dynamic_sampling: bool = False,
    update: Sequence[Node] | None = None,
) -> Workflow:
    """The RL workflow for a recipe's task in `mode`, with the slots filled (see the module doc);
    `check_data` reads the recipe's data before anything starts (see `DataCheck`);
    `dynamic_sampling` adds sync mode's batch filling."""
    if update is not None and mode == "stream_minibatch":
        raise ValueError("an `update` slot runs in sync or async mode, not stream_minibatch")
    prepare: list[Node] = [ComputeAdvantages(), AssembleData(), *adjust]
    filled: list[Node] = [ComputeAdvantages(keys={"sampled_groups": "filled_groups"}), AssembleData(), *adjust]
    eval_due = every(HeldOutEval, lambda e: e.every, include_last=True, before_update=True)
    evaluate = When("eval", eval_due, [EvaluateRewards(), *evaluators])
    finish: list[Node] = [
        RefreshSampler(),
        *([PublishSampler()] if mode == "async" else []),
        When("kl_pre_post", post_update_kl_on, [PostUpdateKL()]),
        *after_update,
        When("checkpoint", every(CheckpointSettings, lambda c: c.save_every), [SaveCheckpoint()]),
        start_evals(),
    ]
    step: list[Node]
    if mode == "sync":
        step = [GetEnvGroups(), evaluate, DoRollouts(), RecordRolloutMetrics(), WriteTranscripts()]
        policy_gradient = [*([FillInformativeBatch(), *filled] if dynamic_sampling else prepare), RLTrainStep()]
        train = policy_gradient if update is None else list(update)
        main: list[Node] = [Loop("rl", "num_steps", [*step, *train, *finish], step=True)]
    elif mode == "stream_minibatch":
        minibatches = Loop(
            "minibatch", "stream_minibatches", [TakeMinibatch(), *prepare, SubmitMinibatch()], reduce_metrics=True
        )
        step = [GetEnvGroups(), evaluate, StartRollouts(), minibatches, FinishStreamStep()]
        main = [Loop("rl", "num_steps", [*step, RecordRolloutMetrics(), WriteTranscripts(), *finish], step=True)]
    else:
        # the taken groups' metrics and transcripts are written while the update is in flight
        logs: list[Node] = [RecordRolloutMetrics(), WriteTranscripts()]
        train = [*filled, RLTrainStep()] if update is None else list(update)
        update_and_log = Parallel("update_and_log", [train, logs])
        trainer = Loop("rl", "num_steps", [evaluate, TakeFreshGroups(), update_and_log, *finish], step=True)
        main = [
            CreateOffPolicyQueue(),
            Parallel("sample_and_train", [[RolloutWorkers()], [trainer, StopRolloutWorkers()]]),
        ]
    return Workflow(
        name=f"rl_{mode}",
        steps=[
            GetTokenizer(),
            MakeRenderer(),
            BuildRLTask(factory, check_data),
            OpenTaskModels(),
            CreateTrainingClient(),
            PlanUpdate(),
            *setup,
            RefreshSampler(after_update=False),
            *main,
            finish_evals(),
            *after_training,
            SaveCheckpoint(final=True),
        ],
        finally_=[CloseBackend()],
    )


def rl_workflow_for(
    factory: RLTaskFactory, check_data: DataCheck | None = None, checks: Sequence[Node] = ()
) -> WorkflowBuilder:
    """A recipe's `workflow(config)`: its mode, plus the warm start and KL penalty it asks for.

    The reference the KL penalty pulls towards is the policy as RL begins (after a warm start).
    `checks` run in the `adjust` slot after the KL stages, on the datums about to be trained
    (`CheckLogprobAgreement`)."""

    def build(config: RLSettings) -> Workflow:
        setup: list[Node] = []
        adjust: list[Node] = []
        algorithm = config.algorithm
        if config.warm_start.steps > 0:
            setup.append(When("fresh_start", fresh_run, [WarmStart()]))
        if algorithm.kl_penalty_coef > 0 or algorithm.kl_loss_coef > 0:
            setup.append(CreateReferenceClient())
        if algorithm.kl_penalty_coef > 0:
            adjust.append(ApplyKLPenalty())
        if algorithm.kl_loss_coef > 0:
            adjust.append(AddReferenceLogprobs())
        dynamic = algorithm.dynamic_sampling is not None
        adjust.extend(checks)
        return rl_workflow(
            factory, config.rl.mode, setup=setup, adjust=adjust, check_data=check_data, dynamic_sampling=dynamic
        )

    return WorkflowBuilder("rl", (RLLoopSettings, WarmStartSettings, AlgorithmSettings), build)
