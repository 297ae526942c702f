"""Self-distillation fine-tuning (SDFT): the RL workflow's sampling, with the policy-gradient update
replaced by cross-entropy against the teacher's top-K distributions (`train_core.self_distillation`).

The teacher is a frozen copy of the policy as SDFT begins (after a warm start, if any), asked for
its top-K logprobs at every position of the student's reply read after the demonstration prompt
(`ScoresPromptDetail.score_prompt`); the [T, K] targets run as K datums each
(`train_core.topk_targets`), so any backend that trains `cross_entropy` trains them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

from pydantic import Field, model_validator

from kitchen.engine.config.run import Count, RunConfig
from kitchen.engine.config.sections import Section
from kitchen.engine.context import Context
from kitchen.engine.errors import StageError
from kitchen.engine.ports import SamplingClient, ScoresPromptDetail, TrainingClient
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Node, When, Workflow, WorkflowBuilder
from kitchen.families.common.settings import OptimizerSettings
from kitchen.families.common.setup import CreateReferenceClient
from kitchen.families.common.training import adam_params, guard_nonfinite, pipelined_steps
from kitchen.families.rl.settings import RLLoopSettings, RLSettings, WarmStartSettings
from kitchen.families.rl.setup import WarmStart
from kitchen.families.rl.workflow import fresh_run, rl_workflow
from train_core.batching import split_evenly
from train_core.losses import merge_loss_metrics
from train_core.renderers.base import Renderer
from train_core.rl.data_processing import assemble_training_data
from train_core.rl.policy_objective import optim_step_metrics
from train_core.rl.rollouts import SampledGroup
from train_core.rl.task import DataCheck, RLTaskFactory
from train_core.self_distillation import (
    DEFAULT_DEMO_TEMPLATE,
    DemonstratedGroupBuilder,
    TopKTargets,
    teacher_view,
    topk_forward_kl,
    topk_target_datum,
)
from train_core.topk_targets import expand_2d_targets
from train_core.types import Datum, ForwardBackwardOutput, ModelInput, PromptDetail

MAX_TOPK = 1024
"""The widest top-K a backend reports (the Tinker API's bound)."""


class SelfDistillationSection(Section):
    """Config section `sdft`: the teacher's prompt and the width of its soft targets."""

    topk: Count = Field(
        20,
        le=MAX_TOPK,
        description="teacher tokens per position distilled (K); 20 matches full-vocabulary KL in the paper's ablation",
    )
    skip_first_tokens: int = Field(
        3, ge=0, description="reply positions at the start of each datum given no target (the reference skips 3)"
    )
    demo_template: str = Field(
        DEFAULT_DEMO_TEMPLATE, description="the teacher's user message; {question} and {golden_answer} are filled in"
    )
    system_prompt: str | None = Field(None, description="a system message the teacher reads first; none by default")

    @model_validator(mode="after")
    def _template_fields(self) -> SelfDistillationSection:
        for field in ("{question}", "{golden_answer}"):
            if field not in self.demo_template:
                raise ValueError(f"sdft.demo_template must contain {field}")
        return self


class SelfDistillationSettings(RLSettings):
    """SDFT on an RL task whose groups carry golden answers (`DemonstratedGroupBuilder`): the env's
    reward is measured, never trained on."""

    sdft: SelfDistillationSection = Field(
        default_factory=SelfDistillationSection, description="the teacher's prompt and K"
    )

    @model_validator(mode="after")
    def _sync_or_async(self) -> SelfDistillationSettings:
        if self.rl.stream_minibatch is not None:
            raise ValueError("rl.stream_minibatch: self-distillation trains in sync or async mode")
        return self


@dataclass(frozen=True)
class SelfDistillationData:
    sdft_targets: list[TopKTargets]
    trained_data: list[Datum]
    """The student's sampled datums (for `PostUpdateKL`)."""


def check_scores_prompt_detail(client: SamplingClient, method: str) -> ScoresPromptDetail:
    """The teacher's client as one that reports top-K prompt logprobs, which `method`'s targets
    are built from; a StageError naming the client when its backend does not."""
    if not isinstance(client, ScoresPromptDetail):
        raise StageError(
            f"the teacher's sampling client ({type(client).__name__}) reports no top-k prompt logprobs "
            f"(ScoresPromptDetail); {method} needs a backend that does (local, noop)"
        )
    return client


class TeacherTopKTargets(Stage):
    """Each sampled reply read by the teacher after its demonstration prompt: the teacher's top-K
    at every reply position, renormalised, as the datum's [T, K] targets. Logs
    `sdft/teacher_entropy` (mean per target position) and `sdft/positions`."""

    calls = (ScoresPromptDetail.score_prompt,)  # an optional capability, checked on the client when it runs

    async def run(
        self,
        ctx: Context,
        sampled_groups: list[SampledGroup],
        teacher_client: SamplingClient,
        renderer: Renderer,
        sdft: SelfDistillationSection,
    ) -> SelfDistillationData:
        teacher = check_scores_prompt_detail(teacher_client, "self-distillation")
        builders_P = [group.builder for group in sampled_groups]
        for builder in builders_P:
            if not isinstance(builder, DemonstratedGroupBuilder):
                raise StageError(
                    f"self-distillation needs env groups with a golden answer (DemonstratedGroupBuilder); "
                    f"the task gave {type(builder).__name__}"
                )
        prompts_P = [
            renderer.build_generation_prompt(b.teacher_messages(sdft.demo_template, sdft.system_prompt)).to_ints()
            for b in builders_P
            if isinstance(b, DemonstratedGroupBuilder)
        ]
        trajectories_P = [group.trajectories for group in sampled_groups]
        # no advantages: the targets, not the rewards, are what is trained
        import torch  # here, not at the top: `kitchen ls` and `keys` import recipes without torch

        zeros_P = [torch.zeros(len(g.trajectories_G)) for g in trajectories_P]
        data_D, metadata_D = assemble_training_data(trajectories_P, zeros_P)
        views_D = [
            teacher_view(datum, prompts_P[meta["group_idx"]]) for datum, meta in zip(data_D, metadata_D, strict=True)
        ]
        detail = PromptDetail(topk=sdft.topk)

        async def score(tokens: list[int]) -> list[list[tuple[int, float]]]:
            scores = await teacher.score_prompt(ModelInput.from_ints(tokens), detail)
            return scores.topk or []

        rows_D = await asyncio.gather(*(score(v.tokens) if v else _nothing() for v in views_D))
        targets_D = [
            topk_target_datum(datum, view, rows, sdft.topk, sdft.skip_first_tokens)
            for datum, view, rows in zip(data_D, views_D, rows_D, strict=True)
        ]
        positions = sum(t.positions for t in targets_D)
        metrics = {"sdft/positions": float(positions), "num_datums": float(len(targets_D))}
        if positions:
            metrics["sdft/teacher_entropy"] = sum(t.teacher_entropy for t in targets_D) / positions
        ctx.record(metrics)
        return SelfDistillationData(targets_D, data_D)


async def _nothing() -> list[list[tuple[int, float]]]:
    return []


class TrainOnTopKTargets(Stage):
    """Cross-entropy against the [T, K] targets in `rl.num_substeps` pipelined optimizer steps (each
    [T, K] datum runs as K datums). Logs `sdft/topk_kl`: the student's forward KL to the teacher's
    renormalised top-K, mean per target position, measured by the step's own forward pass (before
    its update), and `optim/loss:sum`."""

    calls = (TrainingClient.forward_backward, TrainingClient.optim_step)

    async def run(
        self,
        ctx: Context,
        sdft_targets: list[TopKTargets],
        training_client: TrainingClient,
        rl: RLLoopSettings,
        optimizer: OptimizerSettings,
        run: RunConfig,
    ) -> None:
        target_chunks = [c for c in split_evenly([t for t in sdft_targets if t.positions], rl.num_substeps) if c]
        if not target_chunks:
            ctx.log.warning("train_step.skipped", step=ctx.step, reason="no reply position had a teacher target")
            return

        async def forward_backward(chunk: Sequence[Datum]) -> Awaitable[ForwardBackwardOutput]:
            expanded = expand_2d_targets(list(chunk), "cross_entropy")
            assert expanded is not None  # every datum is [T, K]
            pending = await training_client.forward_backward(expanded.data, "cross_entropy")

            async def regrouped() -> ForwardBackwardOutput:
                return expanded.regroup(await pending)

            return regrouped()

        adam = adam_params(ctx, optimizer)
        chunks = [[t.datum for t in chunk] for chunk in target_chunks]
        results = await pipelined_steps(training_client, chunks, forward_backward, adam)
        fb_outputs, optim_outputs = [fb for fb, _ in results], [optim for _, optim in results]
        logprobs_D = [row["logprobs"].to_torch() for fb in fb_outputs for row in fb.loss_fn_outputs]
        trained = [t for chunk in target_chunks for t in chunk]
        ctx.record({"sdft/topk_kl": topk_forward_kl(trained, logprobs_D)})
        ctx.record({"optim/loss:sum": merge_loss_metrics([fb.metrics for fb in fb_outputs]).get("loss:sum", 0.0)})
        ctx.record(optim_step_metrics(optim_outputs))
        guard_nonfinite(ctx, ctx.step, run.max_bad_steps, optim_outputs, fb_outputs)


GROUPS: dict[str, dict[str, str]] = {"sync": {}, "async": {"sampled_groups": "filled_groups"}}

TEACHER_KEYS: dict[str, str] = {"reference_client": "teacher_client", "reference_path": "teacher_path"}


def self_distillation_workflow_for(factory: RLTaskFactory, check_data: DataCheck | None = None) -> WorkflowBuilder:
    """A recipe's `workflow(config)` for SDFT: the RL workflow (sync or async) with a warm start if
    asked, the teacher frozen once after it, and the top-K cross-entropy update."""

    def build(config: SelfDistillationSettings) -> Workflow:
        setup: list[Node] = []
        if config.warm_start.steps > 0:
            setup.append(When("fresh_start", fresh_run, [WarmStart()]))
        setup.append(CreateReferenceClient(name="freeze_teacher", keys=TEACHER_KEYS))
        return rl_workflow(
            factory,
            config.rl.mode,
            setup=setup,
            # async mode trains the groups it took fresh enough (`filled_groups`)
            update=[TeacherTopKTargets(keys=GROUPS[config.rl.mode]), TrainOnTopKTargets()],
            check_data=check_data,
        )

    return WorkflowBuilder("self-distillation", (SelfDistillationSettings, RLLoopSettings, WarmStartSettings), build)
