"""Generalized knowledge distillation (GKD, TRL's `GKDTrainer`): the RL workflow's sampling, with
the update replaced by the generalized JSD to a teacher (`train_core.gkd`) on completions drawn per
batch from the student (`gkd.lmbda` of the batches), the teacher (`gkd.seq_kd`) or the data set.

The ports carry the teacher's top-K next-token logprobs (`ScoresPromptDetail.score_prompt`) and
the student's logprobs of chosen targets (`forward_backward_custom`), never a full vocabulary's
logits; so the divergence is taken on the teacher's top-K support (`gkd.topk`), both
distributions renormalised there, the [T, K] targets running as K datums each
(`train_core.topk_targets`). The student samples every step (the RL workflow's rollouts, whose
rewards are logged); a batch whose source is the teacher or the data set trains on those instead.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from pydantic import Field, model_validator

from kitchen.engine.config.run import Count, RunConfig
from kitchen.engine.config.sections import ConfigRef, Section
from kitchen.engine.context import Context
from kitchen.engine.errors import StageError
from kitchen.engine.ports import SamplingClient, ScoresPromptDetail, TrainingClient
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Node, When, Workflow, WorkflowBuilder
from kitchen.families.common.settings import OptimizerSettings, OtherModel, SamplingSettings
from kitchen.families.common.setup import CheckTokenizerMatch, OpenOtherModel
from kitchen.families.common.training import adam_params, guard_nonfinite
from kitchen.families.distillation.self_distillation import MAX_TOPK, check_scores_prompt_detail
from kitchen.families.rl.settings import RLLoopSettings, RLSettings, WarmStartSettings
from kitchen.families.rl.setup import WarmStart
from kitchen.families.rl.workflow import fresh_run, rl_workflow
from train_core.gkd import (
    CompletionGroupBuilder,
    TopKTeacher,
    batch_source,
    gkd_loss_fn,
    student_topk_logprobs,
    topk_jsd,
    topk_teacher_targets,
)
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.data_processing import assemble_training_data
from train_core.rl.kl_penalty import logprob_input
from train_core.rl.policy_objective import optim_step_metrics
from train_core.rl.rollouts import SampledGroup
from train_core.rl.task import DataCheck, RLTask, RLTaskFactory
from train_core.rl.types import EnvGroupBuilder
from train_core.topk_targets import expand_2d_targets
from train_core.types import Datum, ModelInput, PromptDetail, SamplingParams


class GKDSection(Section):
    """Config section `gkd`: the teacher, the divergence and the mix of completion sources
    (TRL's `GKDConfig.beta`, `lmbda`, `seq_kd`; its `temperature` is `sampling.temperature`)."""

    teacher: OtherModel = Field(
        default_factory=lambda: OtherModel.model_validate({}), description="the model distilled from"
    )
    beta: float = Field(
        0.5, ge=0, le=1, description="generalized JSD weight: 0 forward KL(teacher||student), 1 reverse KL"
    )
    lmbda: float = Field(0.5, ge=0, le=1, description="share of batches trained on the student's own samples")
    seq_kd: bool = Field(False, description="the other batches train on the teacher's samples, not the data set's")
    topk: Count = Field(20, le=MAX_TOPK, description="teacher tokens per position the divergence is taken over (K)")


class GKDSettings(RLSettings):
    """GKD on an RL task whose groups carry a data-set completion (`CompletionGroupBuilder`): the
    env's reward is measured, never trained on."""

    gkd: GKDSection = Field(default_factory=GKDSection, description="the teacher, beta, lmbda, seq_kd and K")

    @model_validator(mode="after")
    def _sync_only(self) -> GKDSettings:
        if self.rl.mode != "sync":
            raise ValueError(f"rl: GKD trains in sync mode (each batch's source is drawn per step), got {self.rl.mode}")
        return self


GKD_TEACHER = ConfigRef(GKDSection, lambda gkd: gkd.teacher)
"""GKD's teacher (`gkd.teacher`)."""


@dataclass(frozen=True)
class GKDData:
    gkd_targets: list[TopKTeacher]
    trained_data: list[Datum]
    """The student's sampled datums (for `PostUpdateKL`), whichever source was trained."""


def completion_builders(builders: list[EnvGroupBuilder]) -> list[CompletionGroupBuilder]:
    """The groups as data-set examples; a StageError names a task whose groups carry none."""
    picked = []
    for builder in builders:
        if not isinstance(builder, CompletionGroupBuilder):
            raise StageError(
                f"GKD needs env groups with a data-set completion (CompletionGroupBuilder); "
                f"the task gave {type(builder).__name__}"
            )
        picked.append(builder)
    return picked


def dataset_sequence(renderer: Renderer, builder: CompletionGroupBuilder) -> tuple[list[int], list[float]]:
    """The data-set example's tokens and, per target, whether it is part of the completion."""
    messages = [*builder.prompt, Message(role="assistant", content=builder.completion)]
    tokens, weights = renderer.build_supervised_example(messages)
    return tokens.to_ints(), [float(w) for w in weights[1:]]


async def score_topk(
    teacher: ScoresPromptDetail, sequences: list[tuple[list[int], list[float]]], k: int
) -> list[TopKTeacher]:
    """Each (tokens, mask) sequence with the teacher's top-K at its masked targets."""
    detail = PromptDetail(topk=k)
    scores = await asyncio.gather(*(teacher.score_prompt(ModelInput.from_ints(t), detail) for t, _ in sequences))
    return [
        topk_teacher_targets(tokens, mask, score.topk or [], k)
        for (tokens, mask), score in zip(sequences, scores, strict=True)
    ]


class GKDBatch(Stage):
    """This step's completions, from the source drawn for it (`train_core.gkd.batch_source`): the
    student's sampled replies, the teacher's replies to the groups' prompts, or the data set's
    completions; each with the teacher's top-K at its completion positions. Logs
    `gkd/on_policy`, `gkd/teacher_generated` (0 or 1) and `gkd/positions`."""

    # score_prompt: an optional capability, checked on the client when it runs
    calls = (SamplingClient.sample, ScoresPromptDetail.score_prompt)

    async def run(
        self,
        ctx: Context,
        sampled_groups: list[SampledGroup],
        teacher_client: SamplingClient,
        renderer: Renderer,
        gkd: GKDSection,
        sampling: SamplingSettings,
        run: RunConfig,
    ) -> GKDData:
        teacher = check_scores_prompt_detail(teacher_client, "GKD")
        builders = completion_builders([group.builder for group in sampled_groups])
        source = batch_source(run.seed, ctx.step, gkd.lmbda, gkd.seq_kd)
        import torch  # here, not at the top: `kitchen ls` imports recipes without torch

        trajectories_P = [group.trajectories for group in sampled_groups]
        zeros_P = [torch.zeros(len(g.trajectories_G)) for g in trajectories_P]
        data_D, _ = assemble_training_data(trajectories_P, zeros_P)
        sequences: list[tuple[list[int], list[float]]]
        if source == "student":
            sequences = [(logprob_input(d).to_ints(), d.loss_fn_inputs["mask"].to_torch().tolist()) for d in data_D]
        elif source == "teacher":
            sequences = await teacher_replies(teacher_client, renderer, builders, sampling, run.seed, ctx.step)
        else:
            sequences = [dataset_sequence(renderer, builder) for builder in builders]
        targets = await score_topk(teacher, sequences, gkd.topk)
        ctx.record(
            {
                "gkd/on_policy": float(source == "student"),
                "gkd/teacher_generated": float(source == "teacher"),
                "gkd/positions": float(sum(t.positions for t in targets)),
            }
        )
        return GKDData(targets, data_D)


async def teacher_replies(
    client: SamplingClient,
    renderer: Renderer,
    builders: list[CompletionGroupBuilder],
    sampling: SamplingSettings,
    seed: int,
    step: int,
) -> list[tuple[list[int], list[float]]]:
    """The teacher's reply to each group's prompt (TRL's `seq_kd`: one per prompt, sampled at
    `sampling.temperature`), as (tokens, completion mask)."""
    prompts = [renderer.build_generation_prompt(list(b.prompt)) for b in builders]
    params = [
        SamplingParams(
            max_tokens=sampling.max_tokens,
            temperature=sampling.temperature,
            seed=random.Random(f"gkd-teacher/{seed}/{step}/{index}").getrandbits(31),
            stop=renderer.get_stop_sequences(),
        )
        for index in range(len(prompts))
    ]
    results = await asyncio.gather(*(client.sample(p, 1, q) for p, q in zip(prompts, params, strict=True)))
    sequences = []
    for prompt, result in zip(prompts, results, strict=True):
        reply = list(result.sequences[0].tokens)
        prompt_tokens = prompt.to_ints()
        sequences.append((prompt_tokens + reply, [0.0] * (len(prompt_tokens) - 1) + [1.0] * len(reply)))
    return sequences


class TrainGKD(Stage):
    """One optimizer step on the batchmean top-K generalized JSD (`gkd.beta`) through
    `forward_backward_custom`. Logs `gkd/jsd` (measured by the step's own forward pass, before its
    update) and the optimizer's metrics."""

    calls = (TrainingClient.forward_backward_custom, TrainingClient.optim_step)

    async def run(
        self,
        ctx: Context,
        gkd_targets: list[TopKTeacher],
        training_client: TrainingClient,
        gkd: GKDSection,
        optimizer: OptimizerSettings,
        run: RunConfig,
    ) -> None:
        targets = [t for t in gkd_targets if t.positions]
        if not targets:
            ctx.log.warning("train_step.skipped", step=ctx.step, reason="no completion position had a teacher target")
            return
        expanded = expand_2d_targets([t.datum for t in targets], "cross_entropy")
        assert expanded is not None  # every datum is [T, K]
        fb = await (
            await training_client.forward_backward_custom(expanded.data, gkd_loss_fn(targets, expanded, gkd.beta))
        )
        optim = await (await training_client.optim_step(adam_params(ctx, optimizer)))
        ctx.record({key: value for key, value in fb.metrics.items() if key.startswith("gkd/jsd")})
        ctx.record(optim_step_metrics([optim]))
        guard_nonfinite(ctx, ctx.step, run.max_bad_steps, [optim], [fb])


class EvaluateGKD(Stage):
    """The student's generalized JSD (at `gkd.beta`, on the teacher's top-K) to the teacher on the
    held-out groups' data-set completions, `eval/gkd_jsd`: fixed sequences, so steps compare."""

    calls = (TrainingClient.forward, ScoresPromptDetail.score_prompt)

    async def run(
        self,
        ctx: Context,
        rl_task: RLTask,
        training_client: TrainingClient,
        teacher_client: SamplingClient,
        renderer: Renderer,
        gkd: GKDSection,
    ) -> None:
        builders = completion_builders(list(rl_task.eval_builders))
        if not builders:
            return
        sequences = [dataset_sequence(renderer, builder) for builder in builders]
        scored = await score_topk(check_scores_prompt_detail(teacher_client, "GKD"), sequences, gkd.topk)
        targets = [t for t in scored if t.positions]
        expanded = expand_2d_targets([t.datum for t in targets], "cross_entropy")
        if expanded is None:  # no held-out completion had a position to compare
            return
        output = await (await training_client.forward(expanded.data, "cross_entropy"))
        logprobs_D = [row["logprobs"].to_torch() for row in output.loss_fn_outputs]
        value, _ = topk_jsd(targets, student_topk_logprobs(expanded, logprobs_D), gkd.beta)
        ctx.record({"eval/gkd_jsd": float(value)})


def gkd_workflow_for(factory: RLTaskFactory, check_data: DataCheck | None = None) -> WorkflowBuilder:
    """A recipe's `workflow(config)` for GKD: the sync RL workflow with a warm start if asked, the
    teacher opened, the GKD update and the held-out divergence with each evaluation."""

    def build(config: GKDSettings) -> Workflow:
        setup: list[Node] = [CheckTokenizerMatch([GKD_TEACHER])]
        if config.warm_start.steps > 0:
            setup.append(When("fresh_start", fresh_run, [WarmStart()]))
        setup.append(OpenOtherModel(GKD_TEACHER, "teacher_client", "teacher_path", name="open_teacher"))
        return rl_workflow(
            factory,
            "sync",
            setup=setup,
            update=[GKDBatch(), TrainGKD()],
            evaluators=[EvaluateGKD()],
            check_data=check_data,
        )

    return WorkflowBuilder("gkd", (GKDSettings, RLLoopSettings, WarmStartSettings), build)
