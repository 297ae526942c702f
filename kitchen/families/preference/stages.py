"""Stages of the preference (DPO) workflow, in the order a step runs them: load comparisons, take
the step's pairs, score them with the frozen reference, submit the DPO step, evaluate. The math
lives in `train_core.preference`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from kitchen.engine.config.run import RunConfig
from kitchen.engine.context import Context
from kitchen.engine.errors import DataError, StageError
from kitchen.engine.ports import MixesSamplerWeights, SamplingClient, ServiceBackend, Tokenizer, TrainingClient
from kitchen.engine.stage import Stage
from kitchen.families.common.completers import AsyncJudge
from kitchen.families.common.requests import score_targets
from kitchen.families.common.settings import DataSettings, OptimizerSettings
from kitchen.families.common.setup import ReferenceOut
from kitchen.families.common.training import InFlight, PendingStep, forward_logprobs, submit_step
from kitchen.families.preference.reward_model import check_comparison_files, comparison_records
from kitchen.families.preference.settings import ComparisonData, DPOLoss, WinRateSettings
from kitchen.families.supervised.stages import Batch
from train_core.batching import batch_for_step
from train_core.preference.datasets import Layout, SkipReport, load_comparisons
from train_core.preference.datums import preference_datums
from train_core.preference.dpo import dpo_loss, make_dpo_custom_loss, pair_sequence_logprobs
from train_core.preference.evaluation import win_rate_both_orderings
from train_core.preference.types import LabeledComparison
from train_core.renderers.base import Message, Renderer
from train_core.renderers.errors import RendererError
from train_core.supervised import bits_per_byte, mean_nll, scored_bytes, sequence_nll
from train_core.types import Datum, SamplingParams

if TYPE_CHECKING:
    import torch

# -- data -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreferenceSplit:
    """One comparison file rendered for DPO: interleaved datums and each pair's prompt."""

    data_D: list[Datum]
    prompts_P: list[list[Message]]
    texts_P: list[tuple[str, str, str]]
    """Each pair's prompt, chosen and rejected completion as plain text (for the examples file)."""


@dataclass(frozen=True)
class PreferenceData:
    train_data: list[Datum]
    eval_data: list[Datum]
    eval_prompts: list[list[Message]]
    eval_pair_texts: list[tuple[str, str, str]]
    num_steps: int


class LoadPreferenceData(Stage):
    """Read the train (and optional held-out) comparison files and render them into interleaved
    chosen/rejected datums, up front, so bad data is found before any training.

    A malformed record stops the run with a DataError naming file and line; comparisons that
    cannot teach a preference (empty or identical completions, a prompt that fills `max_length`,
    mismatched prompts) are skipped, logged with their first line numbers, and counted in the
    metrics as `data/<split>_skipped[/<reason>]`. Also decides the number of optimizer steps.
    """

    def check_inputs(self, config: Any) -> None:
        check_comparison_files(config)

    async def run(self, ctx: Context, renderer: Renderer, data: ComparisonData) -> PreferenceData:
        train = load_preference_split(ctx, renderer, data, data.dataset, "train")
        num_pairs = len(train.prompts_P)
        num_steps = data.num_steps(num_pairs, "usable comparisons", data.dataset, unit=" pairs")
        held_out = (
            load_preference_split(ctx, renderer, data, data.eval_dataset, "eval")
            if data.eval_dataset
            else PreferenceSplit([], [], [])
        )
        ctx.log.info("data.loaded", train_pairs=num_pairs, eval_pairs=len(held_out.prompts_P), num_steps=num_steps)
        return PreferenceData(train.data_D, held_out.data_D, held_out.prompts_P, held_out.texts_P, num_steps)


def read_preference_split(
    ctx: Context, renderer: Renderer, path: str, split: str, layout: Layout, max_length: int | None
) -> list[LabeledComparison]:
    """One comparison file's usable comparisons, each message cut for `max_length`; skipped
    comparisons are logged and counted under `split`."""

    def prompt_length(messages: list[Message]) -> int:
        return renderer.build_generation_prompt(messages).length

    try:
        comparisons, report = load_comparisons(
            path,
            layout,
            prompt_length=prompt_length if max_length is not None else None,
            max_length=max_length,
            records=comparison_records(path),
        )
    except RendererError as exc:
        raise DataError(f"{path}: a comparison cannot be rendered: {exc}") from None
    report_skipped(ctx, report, split)
    return comparisons


def pair_texts(comparisons: Sequence[LabeledComparison]) -> list[tuple[str, str, str]]:
    """Each comparison's prompt, chosen and rejected completion as plain text."""
    texts_P = []
    for labeled in comparisons:
        chosen, rejected = labeled.chosen_and_rejected()
        texts_P.append((as_text(labeled.comparison.prompt_conversation), as_text(chosen), as_text(rejected)))
    return texts_P


def load_preference_split(
    ctx: Context, renderer: Renderer, data: ComparisonData, path: str, split: str
) -> PreferenceSplit:
    """One comparison file rendered for DPO; skipped comparisons are logged and counted."""
    comparisons = read_preference_split(ctx, renderer, path, split, data.dataset_layout, data.max_length)
    try:
        data_D = preference_datums(comparisons, renderer, data.max_length)
    except RendererError as exc:
        raise DataError(f"{path}: a comparison cannot be rendered: {exc}") from None
    prompts_P = [labeled.comparison.prompt_conversation for labeled in comparisons]
    return PreferenceSplit(data_D, prompts_P, pair_texts(comparisons))


def report_skipped(ctx: Context, report: SkipReport, split: str) -> None:
    if report.num_skipped:
        ctx.log.warning("data.skipped", split=split, summary=report.summary())
    ctx.record(
        {
            f"data/{split}_skipped": report.num_skipped,
            **{f"data/{split}_skipped/{reason}": count for reason, count in report.counts.items()},
        }
    )


class GetPreferenceBatch(Stage):
    """The step's `batch_size` pairs, interleaved `[c0, r0, c1, r1, ...]`: the epoch's seeded
    shuffle over pairs (never splitting one), full batches only, so a resumed run sees exactly
    the batches an uninterrupted run would."""

    async def run(self, ctx: Context, train_data: list[Datum], data: DataSettings, run: RunConfig) -> Batch:
        epoch, batch_index, pairs = batch_for_step(ctx.step, len(train_data) // 2, data.batch_size, run.seed)
        ctx.record({"epoch": epoch, "batch": batch_index, "progress": (ctx.step + 1) / (ctx.total_steps or 1)})
        return Batch([datum for pair in pairs for datum in (train_data[2 * pair], train_data[2 * pair + 1])])


# -- the step ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReferenceLogprobs:
    batch_reference_logprobs: list[torch.Tensor]


class ComputeReferenceLogprobs(Stage):
    """Score the step's batch with the frozen reference model, once, and keep the per-datum target
    logprobs; `keys={"batch": "eval_data", "batch_reference_logprobs": "eval_reference_logprobs"}`
    does the same for the held-out set."""

    calls = (SamplingClient.compute_logprobs,)

    async def run(self, reference_client: SamplingClient, batch: list[Datum]) -> ReferenceLogprobs:
        return ReferenceLogprobs(await score_targets(reference_client, batch))


class ComputeDPOReferenceLogprobs(ComputeReferenceLogprobs):
    """`ComputeReferenceLogprobs` for a DPO loss: zeros, without a call, when the loss reads no
    reference (`dpo.reference_free`, or only reference-free losses such as simpo and orpo)."""

    async def run(  # type: ignore[override]
        self, reference_client: SamplingClient, batch: list[Datum], dpo: DPOLoss
    ) -> ReferenceLogprobs:
        if dpo.scores_reference:
            return await super().run(reference_client, batch)
        import torch

        return ReferenceLogprobs([torch.zeros(len(d.loss_fn_inputs["target_tokens"].data)) for d in batch])


class SyncReferenceModel(Stage):
    """TR-DPO's reference update (Gorbatovski et al. 2024, arXiv:2404.09656; TRL's
    `sync_ref_model`): every `dpo.ref_model_sync_steps` steps, after the step's update, the
    reference becomes `alpha * policy + (1 - alpha) * reference` (`dpo.ref_model_mixup_alpha`;
    1 is the hard update, a copy of the policy), saved for the sampler and reopened as
    `reference_client`, its path persisted so a resumed run scores against it. A mix below 1
    needs a training client that mixes weights (`MixesSamplerWeights`: the local backend's)."""

    calls = (TrainingClient.save_weights_for_sampler, ServiceBackend.create_sampling_client)

    async def run(
        self,
        ctx: Context,
        service: ServiceBackend,
        training_client: TrainingClient,
        reference_path: str,
        dpo: DPOLoss,
    ) -> ReferenceOut:
        name = f"reference_{ctx.step + 1:06d}"
        alpha = dpo.ref_model_mixup_alpha
        if alpha == 1.0:
            path = await (await training_client.save_weights_for_sampler(name))
        elif isinstance(training_client, MixesSamplerWeights):
            path = await (await training_client.save_mixed_weights_for_sampler(name, reference_path, alpha))
        else:
            raise StageError(
                f"dpo.ref_model_mixup_alpha {alpha}: this backend's training client cannot mix weights; "
                "use 1.0 (the hard update) or the local backend"
            )
        client = await service.create_sampling_client(model_path=path)
        ctx.log.info("reference.synced", step=ctx.step + 1, alpha=alpha, path=path)
        return ReferenceOut(client, path)


class SubmitDPOStep(Stage):
    """Submit the DPO forward-backward (one forward through the custom loss of the `dpo` section's
    objective against the batch's reference logprobs) and the optimizer step with the scheduled
    learning rate; do not wait."""

    calls = (TrainingClient.forward_backward_custom, TrainingClient.optim_step)

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
        loss_fn = make_dpo_custom_loss(batch_reference_logprobs, dpo.objective(), dpo.ld_alpha)
        return await submit_step(ctx, training_client, batch, loss_fn, optimizer, inflight)


# -- evaluation -------------------------------------------------------------------------------


EXAMPLES_PER_EVAL = 32
"""Held-out pairs written to `preference_examples/step_NNNNNN.jsonl` at each evaluation."""


def as_text(messages: Sequence[Message]) -> str:
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


class EvaluatePreferences(Stage):
    """Held-out preference metrics of the current policy against the frozen reference, with one
    forward pass (no gradients) queued after the step's update: `eval/accuracy`, `eval/margin`,
    `eval/dpo_loss`, `eval/chosen_reward`, `eval/rejected_reward`, `eval/num_pairs`, and
    `eval/nll`, the per-token NLL of the chosen completions (and `eval/bits_per_byte`, the same per
    byte of their text). The first `EXAMPLES_PER_EVAL` pairs,
    with their implicit rewards, go to `preference_examples/step_NNNNNN.jsonl` (`kitchen report`
    shows them)."""

    calls = (TrainingClient.forward,)

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        eval_data: list[Datum],
        eval_reference_logprobs: list[torch.Tensor],
        eval_pair_texts: list[tuple[str, str, str]],
        tokenizer: Tokenizer,
        data: DataSettings,
        dpo: DPOLoss,
    ) -> None:
        data_D = eval_data
        if not data_D:
            return
        logprobs_D, weights_D = await forward_logprobs(training_client, data_D, 2 * data.batch_size)
        chosen_P, rejected_P = pair_sequence_logprobs(logprobs_D, weights_D)
        chosen_ref_P, rejected_ref_P = pair_sequence_logprobs(eval_reference_logprobs, weights_D)
        beta = dpo.beta
        _, metrics = dpo_loss(chosen_P, rejected_P, chosen_ref_P, rejected_ref_P, beta)
        metrics["nll"] = mean_nll(logprobs_D[0::2], weights_D[0::2])
        decode = partial(tokenizer.decode, skip_special_tokens=True)
        chosen_bytes = [scored_bytes(datum, decode) for datum in data_D[0::2]]
        metrics["bits_per_byte"] = bits_per_byte(sequence_nll(logprobs_D[0::2], weights_D[0::2]), chosen_bytes)
        ctx.record({f"eval/{key}": value for key, value in metrics.items()})
        if ctx.run_dir is not None:
            chosen_reward_P = (beta * (chosen_P - chosen_ref_P)).tolist()
            rejected_reward_P = (beta * (rejected_P - rejected_ref_P)).tolist()
            records = [
                {
                    "prompt": prompt,
                    "chosen": chosen,
                    "rejected": rejected,
                    "chosen_reward": c,
                    "rejected_reward": r,
                    "margin": c - r,
                }
                for (prompt, chosen, rejected), c, r in zip(
                    eval_pair_texts, chosen_reward_P, rejected_reward_P, strict=True
                )
            ][:EXAMPLES_PER_EVAL]
            folder = ctx.run_dir / "preference_examples"
            folder.mkdir(exist_ok=True)
            lines = "".join(json.dumps(record) + "\n" for record in records)
            (folder / f"step_{ctx.step:06d}.jsonl").write_text(lines, encoding="utf-8")


class Judge(Protocol):
    def __call__(
        self, prompt: Sequence[Message], completion_A: Message, completion_B: Message
    ) -> float | Awaitable[float]:
        """-1 prefers A, +1 prefers B, 0 is a tie; a judge that calls a model returns an awaitable."""
        ...


async def sample_replies(
    client: SamplingClient, renderer: Renderer, prompts_P: Sequence[list[Message]], params_P: Sequence[SamplingParams]
) -> list[Message]:
    """One assistant reply per prompt, parsed by the renderer (a cut-off reply keeps its raw text)."""
    results = await asyncio.gather(
        *(
            client.sample(renderer.build_generation_prompt(prompt), 1, params)
            for prompt, params in zip(prompts_P, params_P, strict=True)
        )
    )
    return [renderer.parse_response(result.sequences[0].tokens)[0] for result in results]


class EvaluateWinRate(Stage):
    """How often the current policy's reply beats the reference model's on held-out prompts,
    according to the run's `judge` (`keys={"judge": ...}` for another), asked in both orderings:
    `eval/win_rate` (0.5 = no better than the reference), `eval/win_rate_stderr`,
    `eval/win_rate_prompts`.

    Uses the first `win_rate.prompts` held-out prompts and one reply per model and prompt at
    `win_rate.temperature`, with the same seed for both models (common random numbers) and
    `win_rate.max_tokens` at most; all the judge's calls run concurrently. With `prefix` the
    metrics are `{prefix}/win_rate...` instead.
    """

    calls = (TrainingClient.save_weights_and_get_sampling_client, SamplingClient.sample)

    def __init__(self, name: str | None = None, prefix: str = "eval", judge_key: str = "judge") -> None:
        super().__init__(name, keys={"judge": judge_key})
        self.prefix = prefix

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        reference_client: SamplingClient,
        renderer: Renderer,
        eval_prompts: list[list[Message]],
        judge: AsyncJudge,
        win_rate: WinRateSettings,
        run: RunConfig,
    ) -> None:
        prompts_P = eval_prompts[: win_rate.prompts]
        if not prompts_P:
            return
        params_P = [
            SamplingParams(
                max_tokens=win_rate.max_tokens,
                temperature=win_rate.temperature,
                seed=run.seed + index,
                stop=renderer.get_stop_sequences(),
            )
            for index in range(len(prompts_P))
        ]
        policy = await training_client.save_weights_and_get_sampling_client()
        policy_P = await sample_replies(policy, renderer, prompts_P, params_P)
        reference_P = await sample_replies(reference_client, renderer, prompts_P, params_P)
        triples = list(zip(prompts_P, reference_P, policy_P, strict=True))
        policy_as_B = await asyncio.gather(*(judge(p, ref, pol) for p, ref, pol in triples))
        policy_as_A = await asyncio.gather(*(judge(p, pol, ref) for p, ref, pol in triples))
        result = win_rate_both_orderings(policy_as_B, policy_as_A)
        ctx.record(
            {
                f"{self.prefix}/win_rate": result.win_rate,
                f"{self.prefix}/win_rate_stderr": result.stderr,
                f"{self.prefix}/win_rate_prompts": result.num_comparisons,
            }
        )
