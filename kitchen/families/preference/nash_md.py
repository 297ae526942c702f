"""Nash-MD (Munos et al. 2023, as TRL's `NashMDTrainer`): online preference learning where each
prompt gets one completion from the current policy and one from the geometric mixture of the
policy and the frozen reference (`SamplesGeometricMixture.sample_mixture`, `nash_md.mixture_coef`
the reference's share), the judge gives the probability that the policy's wins, and the policy
trains on its own completion with a REINFORCE estimate of that preference and of the KL divergence
to the reference (`train_core.preference.nash_md`). Prompts, judges, win-rate evaluation and
checkpoints are online DPO's."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from kitchen.engine.config.run import RunConfig
from kitchen.engine.config.sections import Section
from kitchen.engine.context import Context
from kitchen.engine.errors import StageError
from kitchen.engine.ports import SamplesGeometricMixture, SamplingClient, TrainingClient
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Node, Workflow
from kitchen.families.common.completers import AsyncJudge
from kitchen.families.common.settings import DataSettings, OptimizerSettings, SamplingSettings
from kitchen.families.common.training import InFlight, PendingStep, submit_step
from kitchen.families.preference.online_dpo import judge_pairs, online_preference_workflow, pair_params, step_prompts
from kitchen.families.preference.settings import DPOLoss, OnlineDPOSettings
from kitchen.families.preference.stages import ComputeReferenceLogprobs, Judge
from train_core.preference.nash_md import make_nash_md_custom_loss
from train_core.renderers.base import Message, Renderer
from train_core.supervised import datum_from_tokens_weights, prompt_completion_tokens
from train_core.types import Datum, SamplingParams

if TYPE_CHECKING:
    import torch


class NashMDMixture(Section):
    """Config section `nash_md`: the mixture the policy's completion is compared with (TRL's
    `NashMDConfig.mixture_coef`, one value: TRL's per-epoch list is not taken). The loss reads
    `dpo.beta`, the KL weight, as TRL's Nash-MD reads OnlineDPOConfig's `beta`."""

    mixture_coef: float = Field(
        0.5,
        ge=0,
        le=1,
        description="the reference's share of the geometric mixture: tokens from softmax(c * ref + (1 - c) * policy)",
    )


class NashMDSettings(OnlineDPOSettings):
    """Nash-MD: each step samples one completion per prompt from the policy and one from the
    policy-reference mixture, the judge gives the policy's completion's win probability
    (`(1 - verdict) / 2`: a reward-model judge gives TRL's `sigmoid(r(y) - r(y'))`), and one step
    trains the policy's completions on `dpo.beta` times the KL estimate minus the centred win
    probability times their logprob."""

    nash_md: NashMDMixture = Field(default_factory=NashMDMixture, description="the mixture completion")

    @model_validator(mode="after")
    def _dpo_keys_nash_md_reads(self) -> NashMDSettings:
        unread = self.dpo.unread_keys({"beta"})
        if unread:
            raise ValueError(f"dpo.{unread[0]}: Nash-MD reads only dpo.beta (its KL weight) of the dpo section")
        return self


@dataclass(frozen=True)
class NashMDBatch:
    """One datum per prompt, the policy's completion; `win_probability[i]` is the judge's
    probability that it beats prompt i's mixture completion."""

    batch: list[Datum]
    win_probability: list[float]


class SampleNashMDPairs(Stage):
    """The step's `data.batch_size` prompts (a seeded shuffle per epoch), one completion each from
    the current policy and from its mixture with the reference, judged. Records
    `online/win_probability` (mean), `online/tie_rate` and `online/reply_tokens`."""

    # sample_mixture: an optional capability, checked on the client when it runs
    calls = (
        TrainingClient.save_weights_and_get_sampling_client,
        SamplingClient.sample,
        SamplesGeometricMixture.sample_mixture,
    )

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
        nash_md: NashMDMixture,
        run: RunConfig,
    ) -> NashMDBatch:
        prompts, inputs = step_prompts(ctx, train_prompts, renderer, data, run)
        policy = await training_client.save_weights_and_get_sampling_client()
        if not isinstance(policy, SamplesGeometricMixture):
            raise StageError(
                f"the policy's sampling client ({type(policy).__name__}) does not sample geometric mixtures "
                "(SamplesGeometricMixture); nash_md needs a backend that does (local, noop)"
            )

        def params(index: int, side: int) -> SamplingParams:
            return pair_params(ctx, renderer, sampling, data, run, index, side)

        async def ours() -> list[list[int]]:
            results = await asyncio.gather(*(policy.sample(m, 1, params(i, 0)) for i, m in enumerate(inputs)))
            return [list(result.sequences[0].tokens) for result in results]

        async def mixture() -> list[list[int]]:
            results = await asyncio.gather(
                *(
                    policy.sample_mixture(m, 1, params(i, 1), reference_client, nash_md.mixture_coef)
                    for i, m in enumerate(inputs)
                )
            )
            return [list(result.sequences[0].tokens) for result in results]

        replies, mixed = await asyncio.gather(ours(), mixture())
        verdicts = await judge_pairs(judge, renderer, prompts, replies, mixed)
        batch = [
            datum_from_tokens_weights(*prompt_completion_tokens(model_input.to_ints(), y), data.max_length)
            for model_input, y in zip(inputs, replies, strict=True)
        ]
        # A judge answers P(second wins) - P(first wins); the policy's completion is the first.
        win_probability = [min(1.0, max(0.0, (1.0 - verdict) / 2.0)) for verdict in verdicts]
        tokens = [len(reply) for reply in (*replies, *mixed)]
        ctx.record(
            {
                "online/win_probability": sum(win_probability) / len(win_probability),
                "online/tie_rate": sum(v == 0 for v in verdicts) / len(verdicts),
                "online/reply_tokens": sum(tokens) / len(tokens),
            }
        )
        return NashMDBatch(batch, win_probability)


class SubmitNashMDStep(Stage):
    """Submit Nash-MD's forward-backward (`make_nash_md_custom_loss` against the batch's reference
    logprobs) and the optimizer step at the scheduled learning rate; do not wait."""

    calls = (TrainingClient.forward_backward_custom, TrainingClient.optim_step)

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        batch: list[Datum],
        batch_reference_logprobs: list[torch.Tensor],
        win_probability: list[float],
        dpo: DPOLoss,
        optimizer: OptimizerSettings,
        inflight: Sequence[PendingStep] = (),
    ) -> InFlight:
        loss_fn = make_nash_md_custom_loss(batch_reference_logprobs, win_probability, dpo.beta)
        return await submit_step(ctx, training_client, batch, loss_fn, optimizer, inflight)


def nash_md_workflow(judge: Judge | None = None, judge_setup: Sequence[Node] = ()) -> Workflow:
    """The Nash-MD workflow with a ready `judge` or `judge_setup` stages that provide one (as
    `online_dpo_workflow`); each evaluation measures the policy's win rate against the reference."""
    step = [SampleNashMDPairs(), ComputeReferenceLogprobs(), SubmitNashMDStep()]
    return online_preference_workflow("nash_md", step, judge, judge_setup)
