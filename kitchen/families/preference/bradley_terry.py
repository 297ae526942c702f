"""The reward-model workflow's stages: load comparisons as score datums, take a step's pairs,
submit the Bradley-Terry step, evaluate held-out pair accuracy. The math lives in
`train_core.preference.bradley_terry`; export in `kitchen.families.preference.reward_export`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kitchen.engine.config.run import RunConfig
from kitchen.engine.context import Context
from kitchen.engine.errors import DataError
from kitchen.engine.ports import Tokenizer, TrainingClient
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Workflow
from kitchen.families.common.settings import DataSettings, OptimizerSettings
from kitchen.families.common.setup import (
    CloseBackend,
    CreateTrainingClient,
    GetTokenizer,
    MakeRenderer,
    single_token_ids,
)
from kitchen.families.common.train_loop import pipelined_training
from kitchen.families.common.training import InFlight, PendingStep, forward_logprobs, loss_fn_metrics, submit_step
from kitchen.families.preference.reward_model import check_comparison_files
from kitchen.families.preference.settings import ComparisonData, RewardModelHead
from kitchen.families.preference.stages import EXAMPLES_PER_EVAL, pair_texts, read_preference_split
from kitchen.families.supervised.stages import Batch
from train_core.batching import batch_for_step
from train_core.preference.bradley_terry import (
    bradley_terry_loss,
    make_reward_custom_loss,
    reward_pair_datums,
    scores_from_token_logprobs,
)
from train_core.renderers.base import Renderer
from train_core.renderers.errors import RendererError
from train_core.types import Datum

DATUMS_PER_PAIR = 4


def score_token_ids(tokenizer: Tokenizer, texts: Sequence[str]) -> tuple[int, int]:
    """The ids of the two score tokens; each must encode to exactly one token."""
    return single_token_ids(tokenizer, texts, "score_tokens")


@dataclass(frozen=True)
class RewardData:
    train_data: list[Datum]
    eval_data: list[Datum]
    eval_pair_texts: list[tuple[str, str, str]]
    num_steps: int


class LoadRewardPairs(Stage):
    """Read the train (and optional held-out) comparison files and render each pair as its four
    score datums, up front, so bad data is found before any training; skips as for DPO."""

    def check_inputs(self, config: Any) -> None:
        check_comparison_files(config)

    async def run(
        self, ctx: Context, tokenizer: Tokenizer, renderer: Renderer, data: ComparisonData, head: RewardModelHead
    ) -> RewardData:
        tokens = score_token_ids(tokenizer, head.score_tokens)

        def split(path: str, name: str) -> tuple[list[Datum], list[tuple[str, str, str]]]:
            comparisons = read_preference_split(ctx, renderer, path, name, data.dataset_layout, data.max_length)
            try:
                return reward_pair_datums(comparisons, renderer, tokens, data.max_length), pair_texts(comparisons)
            except RendererError as exc:
                raise DataError(f"{path}: a comparison cannot be rendered: {exc}") from None

        train, _ = split(data.dataset, "train")
        num_pairs = len(train) // DATUMS_PER_PAIR
        num_steps = data.num_steps(num_pairs, "usable comparisons", data.dataset, unit=" pairs")
        held_out, texts = split(data.eval_dataset, "eval") if data.eval_dataset else ([], [])
        ctx.log.info("data.loaded", train_pairs=num_pairs, eval_pairs=len(texts), num_steps=num_steps)
        return RewardData(train, held_out, texts, num_steps)


class GetRewardBatch(Stage):
    """The step's `batch_size` pairs (four datums each): the epoch's seeded shuffle over pairs,
    full batches only, so a resumed run sees the batches an uninterrupted one would."""

    async def run(self, ctx: Context, train_data: list[Datum], data: DataSettings, run: RunConfig) -> Batch:
        num_pairs = len(train_data) // DATUMS_PER_PAIR
        epoch, batch_index, pairs = batch_for_step(ctx.step, num_pairs, data.batch_size, run.seed)
        ctx.record({"epoch": epoch, "batch": batch_index, "progress": (ctx.step + 1) / (ctx.total_steps or 1)})
        size = DATUMS_PER_PAIR
        return Batch([datum for pair in pairs for datum in train_data[size * pair : size * (pair + 1)]])


class SubmitRewardStep(Stage):
    """Submit the Bradley-Terry forward-backward (one forward of the batch's score datums through
    the custom loss) and the optimizer step; do not wait."""

    calls = (TrainingClient.forward_backward_custom, TrainingClient.optim_step)

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        batch: list[Datum],
        head: RewardModelHead,
        optimizer: OptimizerSettings,
        inflight: Sequence[PendingStep] = (),
    ) -> InFlight:
        loss_fn = make_reward_custom_loss(head.center_rewards_coefficient)
        return await submit_step(ctx, training_client, batch, loss_fn, optimizer, inflight)


class EvaluateRewardModel(Stage):
    """Held-out pair metrics of the reward model being trained, one forward pass (no gradients):
    `eval/accuracy` (share of pairs scored chosen > rejected), `eval/rm_loss`, `eval/margin`,
    `eval/chosen_score`, `eval/rejected_score`. The first `EXAMPLES_PER_EVAL` pairs with their
    scores go to `reward_examples/step_NNNNNN.jsonl`."""

    calls = (TrainingClient.forward,)

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        eval_data: list[Datum],
        eval_pair_texts: list[tuple[str, str, str]],
        data: DataSettings,
        head: RewardModelHead,
    ) -> None:
        if not eval_data:
            return
        size = DATUMS_PER_PAIR * data.batch_size
        logprobs_D, weights_D = await forward_logprobs(training_client, eval_data, size)
        scores = scores_from_token_logprobs(logprobs_D, weights_D)
        chosen_P, rejected_P = scores[0::2], scores[1::2]
        _, metrics = bradley_terry_loss(chosen_P, rejected_P, head.center_rewards_coefficient)
        ctx.record({f"eval/{key}": value for key, value in metrics.items()})
        if ctx.run_dir is not None:
            records = [
                {"prompt": p, "chosen": c, "rejected": r, "chosen_score": sc, "rejected_score": sr}
                for (p, c, r), sc, sr in zip(eval_pair_texts, chosen_P.tolist(), rejected_P.tolist(), strict=True)
            ][:EXAMPLES_PER_EVAL]
            folder = ctx.run_dir / "reward_examples"
            folder.mkdir(exist_ok=True)
            lines = "".join(json.dumps(record) + "\n" for record in records)
            (folder / f"step_{ctx.step:06d}.jsonl").write_text(lines, encoding="utf-8")


def reward_model_workflow() -> Workflow:
    """Bradley-Terry reward-model training: no reference model; one step stays in flight while
    the next batch is taken; an evaluation's forward pass queues after the step's update, so it
    and each checkpoint see the current step's weights."""
    return Workflow(
        name="reward_model",
        steps=[
            GetTokenizer(),
            MakeRenderer(),
            LoadRewardPairs(),
            CreateTrainingClient(),
            *pipelined_training([GetRewardBatch(), SubmitRewardStep()], [EvaluateRewardModel()], loss_fn_metrics),
        ],
        finally_=[CloseBackend()],
    )
