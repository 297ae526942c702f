"""Online DPO (Guo et al. 2024, as TRL's `OnlineDPOTrainer`): pairs sampled from the current
policy and labelled by a judge (a rule, a learned pairwise preference model, or a reward model),
then one DPO step on them against the frozen initial policy. Steps run one at a time: each
step samples from the weights the previous one produced.

The judge reads the replies parsed into messages; training uses the sampled tokens themselves
(after the generation prompt), as TRL does, so the update acts on exactly what the policy
produced (a re-rendered reply may tokenize differently, and would gain an end-of-turn token
that a reply cut off at `max_tokens` never sampled)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kitchen.engine.config.run import RunConfig
from kitchen.engine.context import Context
from kitchen.engine.ports import SamplingClient, TrainingClient
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Loop, Node, When, Workflow, every
from kitchen.families.common.checkpoint import CheckpointSettings, SaveCheckpoint
from kitchen.families.common.completers import AsyncJudge
from kitchen.families.common.settings import DataSettings, HeldOutEval, OptimizerSettings, SamplingSettings
from kitchen.families.common.setup import (
    CloseBackend,
    CreateReferenceClient,
    CreateTrainingClient,
    GetTokenizer,
    MakeRenderer,
)
from kitchen.families.common.training import CollectTrainStep, InFlight, PendingStep, loss_fn_metrics
from kitchen.families.preference.judges import ProvideJudge
from kitchen.families.preference.reward_model import check_comparison_files, read_comparisons
from kitchen.families.preference.settings import ComparisonData, DPOLoss
from kitchen.families.preference.stages import ComputeDPOReferenceLogprobs, EvaluateWinRate, Judge, SubmitDPOStep
from kitchen.families.preference.workflow import reference_sync
from kitchen.families.supervised.stages import Batch
from train_core.batching import batch_for_step
from train_core.renderers.base import Message, Renderer
from train_core.supervised import datum_from_tokens_weights, prompt_completion_tokens
from train_core.types import Datum, ModelInput, SamplingParams

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class OnlinePrompts:
    train_prompts: list[list[Message]]
    eval_prompts: list[list[Message]]
    num_steps: int


class LoadOnlinePrompts(Stage):
    """The prompts of the train (and held-out) comparison files; decides the number of steps."""

    def check_inputs(self, config: Any) -> None:
        check_comparison_files(config)

    async def run(self, ctx: Context, data: ComparisonData) -> OnlinePrompts:
        def prompts(path: str | None) -> list[list[Message]]:
            comparisons = read_comparisons(path, data.dataset_layout, data.max_length) if path else []
            return [labeled.comparison.prompt_conversation for labeled in comparisons]

        train = prompts(data.dataset)
        num_steps = data.num_steps(len(train), "prompts", data.dataset)
        held_out = prompts(data.eval_dataset)
        ctx.log.info("data.loaded", train_prompts=len(train), eval_prompts=len(held_out), num_steps=num_steps)
        return OnlinePrompts(train, held_out, num_steps)


def judged_pair(
    prompt_tokens: Sequence[int], replies: Sequence[Sequence[int]], verdict: float, max_length: int | None
) -> list[Datum]:
    """`[chosen, rejected]` datums of two sampled replies (tokens after the prompt) by the judge's
    verdict (> 0 prefers the second); none for a tie."""
    if verdict == 0:
        return []
    chosen, rejected = (replies[1], replies[0]) if verdict > 0 else (replies[0], replies[1])
    return [
        datum_from_tokens_weights(*prompt_completion_tokens(prompt_tokens, reply), max_length)
        for reply in (chosen, rejected)
    ]


class SampleJudgedPairs(Stage):
    """The step's `batch_size` prompts (a seeded shuffle per epoch), two replies each from the
    current policy, judged; the decisive pairs as `batch` (`[c0, r0, c1, r1, ...]`). Records
    `online/pairs`, `online/tie_rate` and `online/reply_tokens` (mean sampled tokens)."""

    calls = (TrainingClient.save_weights_and_get_sampling_client, SamplingClient.sample)

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        renderer: Renderer,
        train_prompts: list[list[Message]],
        judge: AsyncJudge,
        data: DataSettings,
        sampling: SamplingSettings,
        run: RunConfig,
    ) -> Batch:
        prompts, inputs = step_prompts(ctx, train_prompts, renderer, data, run)
        policy = await training_client.save_weights_and_get_sampling_client()
        results = await asyncio.gather(
            *(
                policy.sample(
                    model_input,
                    2,
                    SamplingParams(
                        max_tokens=sampling.max_tokens,
                        temperature=sampling.temperature,
                        seed=run.seed + ctx.step * data.batch_size + index,
                        stop=renderer.get_stop_sequences(),
                    ),
                )
                for index, model_input in enumerate(inputs)
            )
        )
        replies = [[renderer.parse_response(seq.tokens)[0] for seq in result.sequences] for result in results]
        verdicts = await asyncio.gather(*(judge(p, r[0], r[1]) for p, r in zip(prompts, replies, strict=True)))
        batch = [
            datum
            for model_input, result, verdict in zip(inputs, results, verdicts, strict=True)
            for datum in judged_pair(
                model_input.to_ints(), [seq.tokens for seq in result.sequences], verdict, data.max_length
            )
        ]
        tokens = [len(seq.tokens) for result in results for seq in result.sequences]
        ctx.record(
            {
                "online/pairs": len(batch) // 2,
                "online/tie_rate": sum(v == 0 for v in verdicts) / len(verdicts),
                "online/reply_tokens": sum(tokens) / len(tokens),
            }
        )
        return Batch(batch)


def step_prompts(
    ctx: Context, train_prompts: list[list[Message]], renderer: Renderer, data: DataSettings, run: RunConfig
) -> tuple[list[list[Message]], list[ModelInput]]:
    """The step's prompts (its batch of `train_prompts`; epoch, batch and progress recorded) and
    their generation inputs: where every online preference step starts."""
    epoch, batch_index, indices = batch_for_step(ctx.step, len(train_prompts), data.batch_size, run.seed)
    ctx.record({"epoch": epoch, "batch": batch_index, "progress": (ctx.step + 1) / (ctx.total_steps or 1)})
    prompts = [train_prompts[i] for i in indices]
    return prompts, [renderer.build_generation_prompt(prompt) for prompt in prompts]


def pair_params(
    ctx: Context,
    renderer: Renderer,
    sampling: SamplingSettings,
    data: DataSettings,
    run: RunConfig,
    index: int,
    side: int,
) -> SamplingParams:
    """Sampling params for the step's prompt `index`, side 0 (the policy) or 1 (the other model of
    the pair). Each side has its own seed: with one seed, the two completions would coincide while
    the models are still close, and every pair would tie."""
    return SamplingParams(
        max_tokens=sampling.max_tokens,
        temperature=sampling.temperature,
        seed=run.seed + 2 * (ctx.step * data.batch_size + index) + side,
        stop=renderer.get_stop_sequences(),
    )


async def judge_pairs(
    judge: AsyncJudge, renderer: Renderer, prompts: list[list[Message]], first: list[list[int]], second: list[list[int]]
) -> list[float]:
    """The judge's verdict on each prompt's two completions (P(second wins) - P(first wins))."""
    return list(
        await asyncio.gather(
            *(
                judge(prompt, renderer.parse_response(a)[0], renderer.parse_response(b)[0])
                for prompt, a, b in zip(prompts, first, second, strict=True)
            )
        )
    )


class SubmitOnlineDPOStep(SubmitDPOStep):
    """`SubmitDPOStep` on the judged pairs; a step whose pairs all tied trains nothing."""

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        batch: list[Datum],
        batch_reference_logprobs: list[torch.Tensor],
        dpo: DPOLoss,
        optimizer: OptimizerSettings,
        inflight: Sequence[PendingStep] = (),
    ) -> InFlight:
        if not batch:
            ctx.log.warning("online_dpo.all_tied", step=ctx.step)
            return InFlight(list(inflight))
        return await super().run(ctx, training_client, batch, batch_reference_logprobs, dpo, optimizer, inflight)


def online_preference_workflow(
    name: str,
    step: Sequence[Node],
    judge: Judge | None = None,
    judge_setup: Sequence[Node] = (),
    after_step: Sequence[Node] = (),
) -> Workflow:
    """An online preference workflow: the prompts, the policy and the reference, a judge (a ready
    `judge`, a rule, or `judge_setup` stages that put one in the state as `judge` once the clients
    exist: a learned judge), then per step the `step` stages (sample and judge pairs, reference
    logprobs, submit), the step's collection, `after_step`, evaluation and checkpoints. Each evaluation
    measures the policy's win rate against the reference by the same judge. Online DPO, XPO and
    Nash-MD differ only in `step`."""
    if judge is not None:
        judge_setup = [*judge_setup, ProvideJudge(judge)]
    return Workflow(
        name=name,
        steps=[
            GetTokenizer(),
            MakeRenderer(),
            LoadOnlinePrompts(),
            CreateTrainingClient(),
            CreateReferenceClient(),
            *judge_setup,
            Loop(
                "train",
                over="num_steps",
                step=True,
                body=[
                    *step,
                    CollectTrainStep(keep=0, step_metrics=loss_fn_metrics),
                    *after_step,
                    When("eval", every(HeldOutEval, lambda e: e.every, include_last=True), [EvaluateWinRate()]),
                    When("checkpoint", every(CheckpointSettings, lambda c: c.save_every), [SaveCheckpoint()]),
                ],
            ),
            SaveCheckpoint(final=True),
        ],
        finally_=[CloseBackend()],
    )


def online_dpo_workflow(judge: Judge | None = None, judge_setup: Sequence[Node] = ()) -> Workflow:
    """The online DPO workflow (`online_preference_workflow`); the reference follows the policy
    where `dpo.sync_ref_model` says (TR-DPO)."""
    step = [SampleJudgedPairs(), ComputeDPOReferenceLogprobs(), SubmitOnlineDPOStep()]
    return online_preference_workflow("online_dpo", step, judge, judge_setup, after_step=[reference_sync()])
