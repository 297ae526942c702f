"""XPO (Xie et al. 2024, as TRL's `XPOTrainer`): online DPO where each prompt's pair is one
completion from the current policy and one from the frozen reference model, ranked by the judge,
plus an exploration term `xpo.alpha * log pi(reference's completion)` (`train_core.preference.xpo`).
Everything else (prompts, judges, win-rate evaluation, checkpoints) is online DPO's."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from kitchen.engine.config.run import RunConfig
from kitchen.engine.config.sections import Section
from kitchen.engine.context import Context
from kitchen.engine.ports import SamplingClient, TrainingClient
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Node, Workflow
from kitchen.families.common.completers import AsyncJudge
from kitchen.families.common.settings import DataSettings, OptimizerSettings, SamplingSettings
from kitchen.families.common.training import InFlight, PendingStep, submit_step
from kitchen.families.preference.online_dpo import judge_pairs, online_preference_workflow, pair_params, step_prompts
from kitchen.families.preference.settings import DPOLoss, OnlineDPOSettings
from kitchen.families.preference.stages import ComputeReferenceLogprobs, Judge
from train_core.preference.xpo import XPO_LOSS_TYPES, make_xpo_custom_loss
from train_core.renderers.base import Message, Renderer
from train_core.supervised import datum_from_tokens_weights, prompt_completion_tokens
from train_core.types import Datum

if TYPE_CHECKING:
    import torch


class XPOLoss(Section):
    """Config section `xpo`: the exploration term's weight (TRL's `XPOConfig.alpha`). The DPO term
    reads `dpo.beta` and `dpo.loss_type` (sigmoid or ipo), as TRL's XPO reads OnlineDPOConfig's."""

    alpha: float = Field(1e-5, ge=0, description="weight of the exploration term alpha * log pi(reference completion)")


class XPOSettings(OnlineDPOSettings):
    """XPO: each step samples one completion per prompt from the policy and one from the reference
    model, the judge ranks them (a tie counts the policy's as chosen, as TRL does), and one step
    trains online DPO's loss on the pair plus `xpo.alpha` times the exploration term."""

    xpo: XPOLoss = Field(default_factory=XPOLoss, description="the exploration term")

    @model_validator(mode="after")
    def _dpo_keys_xpo_reads(self) -> XPOSettings:
        loss_types = self.dpo.loss_types
        if len(loss_types) != 1 or loss_types[0] not in XPO_LOSS_TYPES:
            names = ", ".join(XPO_LOSS_TYPES)
            raise ValueError(f"dpo.loss_type {self.dpo.loss_type}: XPO's DPO term is one of {names}")
        unread = self.dpo.unread_keys({"beta", "loss_type"})
        if unread:
            raise ValueError(f"dpo.{unread[0]}: XPO reads only dpo.beta and dpo.loss_type of the dpo section")
        return self


@dataclass(frozen=True)
class XPOBatch:
    """`[y_0, y~_0, y_1, y~_1, ...]`: per prompt the policy's completion, then the reference's;
    `policy_chosen[i]` says whether the judge preferred (or tied) the policy's of prompt i."""

    batch: list[Datum]
    policy_chosen: list[bool]


class SampleXPOPairs(Stage):
    """The step's `data.batch_size` prompts (a seeded shuffle per epoch), one completion each from
    the current policy and from the reference model, judged. Records `online/policy_chosen` (the
    fraction the judge gave the policy, ties included), `online/tie_rate` and `online/reply_tokens`."""

    calls = (TrainingClient.save_weights_and_get_sampling_client, SamplingClient.sample)

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        reference_client: SamplingClient,
        renderer: Renderer,
        train_prompts: list[list[Message]],
        judge: AsyncJudge,
        data: DataSettings,
        sampling: SamplingSettings,
        run: RunConfig,
    ) -> XPOBatch:
        prompts, inputs = step_prompts(ctx, train_prompts, renderer, data, run)
        policy = await training_client.save_weights_and_get_sampling_client()

        async def one(client: SamplingClient, side: int) -> list[list[int]]:
            results = await asyncio.gather(
                *(
                    client.sample(m, 1, pair_params(ctx, renderer, sampling, data, run, i, side))
                    for i, m in enumerate(inputs)
                )
            )
            return [list(result.sequences[0].tokens) for result in results]

        ours, theirs = await asyncio.gather(one(policy, 0), one(reference_client, 1))
        verdicts = await judge_pairs(judge, renderer, prompts, ours, theirs)
        batch = [
            datum_from_tokens_weights(*prompt_completion_tokens(model_input.to_ints(), reply), data.max_length)
            for model_input, y, y_ref in zip(inputs, ours, theirs, strict=True)
            for reply in (y, y_ref)
        ]
        policy_chosen = [verdict <= 0 for verdict in verdicts]  # TRL: model_scores >= ref_scores
        tokens = [len(reply) for reply in (*ours, *theirs)]
        ctx.record(
            {
                "online/policy_chosen": sum(policy_chosen) / len(policy_chosen),
                "online/tie_rate": sum(v == 0 for v in verdicts) / len(verdicts),
                "online/reply_tokens": sum(tokens) / len(tokens),
            }
        )
        return XPOBatch(batch, policy_chosen)


class SubmitXPOStep(Stage):
    """Submit XPO's forward-backward (`make_xpo_custom_loss` against the batch's reference
    logprobs) and the optimizer step at the scheduled learning rate; do not wait."""

    calls = (TrainingClient.forward_backward_custom, TrainingClient.optim_step)

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        batch: list[Datum],
        batch_reference_logprobs: list[torch.Tensor],
        policy_chosen: list[bool],
        dpo: DPOLoss,
        xpo: XPOLoss,
        optimizer: OptimizerSettings,
        inflight: Sequence[PendingStep] = (),
    ) -> InFlight:
        loss_fn = make_xpo_custom_loss(batch_reference_logprobs, policy_chosen, dpo.beta, xpo.alpha, dpo.loss_types[0])
        return await submit_step(ctx, training_client, batch, loss_fn, optimizer, inflight)


def xpo_workflow(judge: Judge | None = None, judge_setup: Sequence[Node] = ()) -> Workflow:
    """The XPO workflow with a ready `judge` or `judge_setup` stages that provide one (as
    `online_dpo_workflow`); each evaluation measures the policy's win rate against the reference."""
    step = [SampleXPOPairs(), ComputeReferenceLogprobs(), SubmitXPOStep()]
    return online_preference_workflow("xpo", step, judge, judge_setup)
