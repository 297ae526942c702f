"""Stages of the preference (DPO) workflow, in the order a step runs them: load comparisons, take
the step's pairs, score them with the frozen reference, submit the DPO step, evaluate. The math
lives in `train_core.preference`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kitchen.completers import as_async_judge
from kitchen.context import Context
from kitchen.errors import DataError
from kitchen.ports import SamplingClient
from kitchen.preference.reward_model import check_comparison_files, comparison_records
from kitchen.requests import score_targets
from kitchen.settings import ADAM_KEYS
from kitchen.stage import Stage
from kitchen.stages.training import adam_params, put_in_flight
from train_core.batching import batch_for_step, batches_per_epoch
from train_core.preference.datasets import SkipReport, load_comparisons
from train_core.preference.datums import preference_datums
from train_core.preference.dpo import dpo_loss, make_dpo_custom_loss, pair_sequence_logprobs
from train_core.preference.evaluation import win_rate_both_orderings
from train_core.preference.losses import PreferenceLossParams
from train_core.renderers.base import Message, Renderer
from train_core.renderers.errors import RendererError
from train_core.supervised import mean_nll
from train_core.types import Datum, SamplingParams

# -- data -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreferenceSplit:
    """One comparison file rendered for DPO: interleaved datums and each pair's prompt."""

    data_D: list[Datum]
    prompts_P: list[list[Message]]
    texts_P: list[tuple[str, str, str]]
    """Each pair's prompt, chosen and rejected completion as plain text (for the examples file)."""


class LoadPreferenceData(Stage):
    """Read the train (and optional held-out) comparison files and render them into interleaved
    chosen/rejected datums, up front, so bad data is found before any training.

    A malformed record stops the run with a DataError naming file and line; comparisons that
    cannot teach a preference (empty or identical completions, a prompt that fills `max_length`,
    mismatched prompts) are skipped, logged with their first line numbers, and counted in the
    metrics as `data/<split>_skipped[/<reason>]`. Also decides the number of optimizer steps.
    """

    reads = ("renderer",)
    writes = ("train_data", "eval_data", "eval_prompts", "eval_pair_texts", "num_steps")
    config_keys = ("dataset", "dataset_layout", "eval_dataset", "batch_size", "num_epochs", "max_steps", "max_length")

    def check_inputs(self, config: Any) -> None:
        check_comparison_files(config)

    def _load(self, ctx: Context, path: str, split: str) -> PreferenceSplit:
        renderer: Renderer = ctx["renderer"]
        max_length = ctx.config.max_length

        def prompt_length(messages: list[Message]) -> int:
            return renderer.build_generation_prompt(messages).length

        try:
            comparisons, report = load_comparisons(
                path,
                ctx.config.dataset_layout,
                prompt_length=prompt_length if max_length is not None else None,
                max_length=max_length,
                records=comparison_records(path),
            )
            data_D = preference_datums(comparisons, renderer, max_length)
        except RendererError as exc:
            raise DataError(f"{path}: a comparison cannot be rendered: {exc}") from None
        self._report(ctx, report, split)
        texts_P = []
        for labeled in comparisons:
            chosen, rejected = labeled.chosen_and_rejected()
            texts_P.append((as_text(labeled.comparison.prompt_conversation), as_text(chosen), as_text(rejected)))
        return PreferenceSplit(data_D, [labeled.comparison.prompt_conversation for labeled in comparisons], texts_P)

    def _report(self, ctx: Context, report: SkipReport, split: str) -> None:
        if report.num_skipped:
            ctx.log.warning("data.skipped", split=split, summary=report.summary())
        ctx.record(
            {
                f"data/{split}_skipped": report.num_skipped,
                **{f"data/{split}_skipped/{reason}": count for reason, count in report.counts.items()},
            }
        )

    async def run(self, ctx: Context) -> None:
        config = ctx.config
        train = self._load(ctx, config.dataset, "train")
        num_pairs = len(train.prompts_P)
        per_epoch = batches_per_epoch(num_pairs, config.batch_size)
        if per_epoch == 0:
            raise DataError(
                f"{config.dataset}: {num_pairs} usable comparisons are fewer than one batch "
                f"(batch_size={config.batch_size} pairs)"
            )
        num_steps = per_epoch * config.num_epochs
        if config.max_steps is not None:
            num_steps = min(num_steps, config.max_steps)
        held_out = self._load(ctx, config.eval_dataset, "eval") if config.eval_dataset else PreferenceSplit([], [], [])
        ctx["train_data"] = train.data_D
        ctx["eval_data"] = held_out.data_D
        ctx["eval_prompts"] = held_out.prompts_P
        ctx["eval_pair_texts"] = held_out.texts_P
        ctx["num_steps"] = num_steps
        ctx.log.info("data.loaded", train_pairs=num_pairs, eval_pairs=len(held_out.prompts_P), num_steps=num_steps)


class GetPreferenceBatch(Stage):
    """The step's `batch_size` pairs, interleaved `[c0, r0, c1, r1, ...]`: the epoch's seeded
    shuffle over pairs (never splitting one), full batches only, so a resumed run sees exactly
    the batches an uninterrupted run would."""

    reads = ("train_data",)
    writes = ("batch",)
    config_keys = ("batch_size", "seed")

    async def run(self, ctx: Context) -> None:
        data = ctx["train_data"]
        epoch, batch_index, pairs = batch_for_step(ctx.step, len(data) // 2, ctx.config.batch_size, ctx.config.seed)
        ctx["batch"] = [datum for pair in pairs for datum in (data[2 * pair], data[2 * pair + 1])]
        ctx.record({"epoch": epoch, "batch": batch_index, "progress": (ctx.step + 1) / (ctx.total_steps or 1)})


# -- the step ---------------------------------------------------------------------------------


class ComputeReferenceLogprobs(Stage):
    """Score the datums under state key `source` with the frozen reference model, once, and
    write the per-datum target logprobs to `target`: for the step's batch, or the held-out set."""

    calls = ("SamplingClient.compute_logprobs",)

    def __init__(
        self, source: str = "batch", target: str = "batch_reference_logprobs", name: str | None = None
    ) -> None:
        super().__init__(name)
        self.source = source
        self.target = target
        self.reads = ("reference_client", source)
        self.writes = (target,)

    async def run(self, ctx: Context) -> None:
        ctx[self.target] = await score_targets(ctx["reference_client"], ctx[self.source])


class SubmitDPOStep(Stage):
    """Submit the DPO forward-backward (one forward through the custom loss of `loss_type` against
    the batch's reference logprobs) and the optimizer step with the scheduled learning rate; do
    not wait. (The reference-free `simpo` and `orpo` ignore the reference logprobs.)"""

    reads = ("training_client", "batch", "batch_reference_logprobs")
    writes = ("inflight",)
    calls = ("TrainingClient.forward_backward_custom", "TrainingClient.optim_step")
    config_keys = (*ADAM_KEYS, "dpo_beta", "loss_type", "label_smoothing", "simpo_gamma", "orpo_lambda")

    async def run(self, ctx: Context) -> None:
        client = ctx["training_client"]
        params = adam_params(ctx)
        config = ctx.config
        loss_params = PreferenceLossParams(
            label_smoothing=config.label_smoothing, simpo_gamma=config.simpo_gamma, orpo_lambda=config.orpo_lambda
        )
        loss_fn = make_dpo_custom_loss(ctx["batch_reference_logprobs"], config.dpo_beta, config.loss_type, loss_params)
        fb = await client.forward_backward_custom(ctx["batch"], loss_fn)
        put_in_flight(ctx, params, fb, await client.optim_step(params))


# -- evaluation -------------------------------------------------------------------------------


EXAMPLES_PER_EVAL = 32
"""Held-out pairs written to `preference_examples/step_NNNNNN.jsonl` at each evaluation."""


def as_text(messages: Sequence[Message]) -> str:
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


class EvaluatePreferences(Stage):
    """Held-out preference metrics of the current policy against the frozen reference, with one
    forward pass (no gradients) queued after the step's update: `eval/accuracy`, `eval/margin`,
    `eval/dpo_loss`, `eval/chosen_reward`, `eval/rejected_reward`, `eval/num_pairs`, and
    `eval/nll`, the per-token NLL of the chosen completions. The first `EXAMPLES_PER_EVAL` pairs,
    with their implicit rewards, go to `preference_examples/step_NNNNNN.jsonl` (`kitchen report`
    shows them)."""

    reads = ("training_client", "eval_data", "eval_reference_logprobs", "eval_pair_texts")
    calls = ("TrainingClient.forward",)
    config_keys = ("batch_size", "dpo_beta")

    async def run(self, ctx: Context) -> None:
        data_D = ctx["eval_data"]
        if not data_D:
            return
        client = ctx["training_client"]
        size = 2 * ctx.config.batch_size
        futures = [await client.forward(data_D[i : i + size], "cross_entropy") for i in range(0, len(data_D), size)]
        logprobs_D = [out["logprobs"].to_torch() for fut in futures for out in (await fut).loss_fn_outputs]
        weights_D = [datum.loss_fn_inputs["weights"].to_torch() for datum in data_D]
        chosen_P, rejected_P = pair_sequence_logprobs(logprobs_D, weights_D)
        chosen_ref_P, rejected_ref_P = pair_sequence_logprobs(ctx["eval_reference_logprobs"], weights_D)
        beta = ctx.config.dpo_beta
        _, metrics = dpo_loss(chosen_P, rejected_P, chosen_ref_P, rejected_ref_P, beta)
        metrics["nll"] = mean_nll(logprobs_D[0::2], weights_D[0::2])
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
                    ctx["eval_pair_texts"], chosen_reward_P, rejected_reward_P, strict=True
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
    according to `judge`, asked in both orderings: `eval/win_rate` (0.5 = no better than the
    reference), `eval/win_rate_stderr`, `eval/win_rate_prompts`.

    Uses the first `win_rate_prompts` held-out prompts and one reply per model and prompt at
    `win_rate_temperature`, with the same seed for both models (common random numbers) and
    `win_rate_max_tokens` at most. `judge` is a judge, or the state key of one opened during the
    run (a learned judge, see `OpenJudge`); all its calls run concurrently. With `prefix` the
    metrics are `{prefix}/win_rate...` instead.
    """

    calls = ("TrainingClient.save_weights_and_get_sampling_client", "SamplingClient.sample")
    config_keys = ("win_rate_prompts", "win_rate_max_tokens", "win_rate_temperature", "seed")

    def __init__(self, judge: Judge | str, name: str | None = None, prefix: str = "eval") -> None:
        super().__init__(name)
        self.judge = judge
        self.prefix = prefix
        own = ("training_client", "reference_client", "renderer", "eval_prompts")
        self.reads = (*own, judge) if isinstance(judge, str) else own

    async def run(self, ctx: Context) -> None:
        config = ctx.config
        prompts_P = ctx["eval_prompts"][: config.win_rate_prompts]
        if not prompts_P:
            return
        renderer: Renderer = ctx["renderer"]
        params_P = [
            SamplingParams(
                max_tokens=config.win_rate_max_tokens,
                temperature=config.win_rate_temperature,
                seed=config.seed + index,
                stop=renderer.get_stop_sequences(),
            )
            for index in range(len(prompts_P))
        ]
        policy = await ctx["training_client"].save_weights_and_get_sampling_client()
        policy_P = await sample_replies(policy, renderer, prompts_P, params_P)
        reference_P = await sample_replies(ctx["reference_client"], renderer, prompts_P, params_P)
        judge = as_async_judge(ctx[self.judge] if isinstance(self.judge, str) else self.judge)
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
