"""KTO's stages and workflow: load unpaired examples, take a step's examples with their mismatched
pairs, score them with the frozen reference, submit the KTO step, evaluate. The math lives in
`train_core.preference.kto`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kitchen.engine.config.run import RunConfig
from kitchen.engine.config.sections import section_of
from kitchen.engine.context import Context
from kitchen.engine.errors import DataError
from kitchen.engine.ports import TrainingClient
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Workflow
from kitchen.families.common.settings import DataSettings, OptimizerSettings
from kitchen.families.common.setup import (
    CloseBackend,
    CreateReferenceClient,
    CreateTrainingClient,
    GetTokenizer,
    MakeRenderer,
)
from kitchen.families.common.train_loop import pipelined_training
from kitchen.families.common.training import InFlight, PendingStep, loss_fn_metrics, submit_step
from kitchen.families.preference.reward_model import comparison_records
from kitchen.families.preference.settings import ComparisonData, KTOLoss
from kitchen.families.preference.stages import ComputeReferenceLogprobs, report_skipped
from train_core.batching import batch_for_step
from train_core.errors import DataFormatError
from train_core.preference.datasets import UnpairedExample, load_unpaired
from train_core.preference.datums import completion_datum
from train_core.preference.kto import KtoParams, kto_from_token_logprobs, make_kto_custom_loss
from train_core.renderers.base import Renderer
from train_core.renderers.errors import RendererError
from train_core.types import Datum

if TYPE_CHECKING:
    import torch


def read_unpaired(
    ctx: Context | None, renderer: Renderer, data: ComparisonData, path: str, split: str
) -> list[UnpairedExample]:
    """A file's usable unpaired examples (skips logged and counted when `ctx` is given)."""

    def prompt_length(messages: list[Any]) -> int:
        return renderer.build_generation_prompt(messages).length

    try:
        examples, report = load_unpaired(
            path,
            data.dataset_layout,
            prompt_length=prompt_length if data.max_length is not None else None,
            max_length=data.max_length,
            records=comparison_records(path),
        )
    except DataFormatError as exc:
        raise DataError(str(exc)) from None
    if ctx is not None:
        report_skipped(ctx, report, split)
    return examples


def kto_datums(renderer: Renderer, examples: Sequence[UnpairedExample], max_length: int | None) -> list[Datum]:
    """`[x_0 .. x_{B-1}, kl_0 .. kl_{B-1}]`: the examples, then each prompt i with completion i-1
    (cyclically), the mismatched pairs whose log-ratios estimate KTO's reference point."""
    try:
        own = [completion_datum(renderer, x.prompt, x.completion, max_length) for x in examples]
        shifted = [examples[i - 1].completion for i in range(len(examples))]
        kl = [completion_datum(renderer, x.prompt, c, max_length) for x, c in zip(examples, shifted, strict=True)]
    except RendererError as exc:
        raise DataError(f"an example cannot be rendered: {exc}") from None
    return own + kl


@dataclass(frozen=True)
class UnpairedData:
    train_examples: list[UnpairedExample]
    eval_data: list[Datum]
    eval_desirable: list[bool]
    num_steps: int


class LoadUnpairedData(Stage):
    """Read the train (and optional held-out) files as unpaired examples, up front, so bad data
    is found before any training; decide the number of steps. The held-out set is rendered now,
    with its mismatched pairs (over the whole set); training batches are rendered per step."""

    def check_inputs(self, config: Any) -> None:
        data = section_of(config, ComparisonData)
        for source in (data.dataset, data.eval_dataset):
            if source:
                try:
                    load_unpaired(source, data.dataset_layout, records=comparison_records(source))
                except DataFormatError as exc:
                    raise DataError(str(exc)) from None

    async def run(self, ctx: Context, renderer: Renderer, data: ComparisonData) -> UnpairedData:
        train = read_unpaired(ctx, renderer, data, data.dataset, "train")
        num_steps = data.num_steps(len(train), "usable examples", data.dataset)
        held_out = read_unpaired(ctx, renderer, data, data.eval_dataset, "eval") if data.eval_dataset else []
        if len(held_out) == 1:
            raise DataError(f"{data.eval_dataset}: one held-out example has no mismatched pair; give two or more")
        desirable = sum(x.desirable for x in train)
        ctx.log.info(
            "data.loaded",
            train_examples=len(train),
            desirable=desirable,
            undesirable=len(train) - desirable,
            eval_examples=len(held_out),
            num_steps=num_steps,
        )
        eval_data = kto_datums(renderer, held_out, data.max_length) if held_out else []
        return UnpairedData(train, eval_data, [x.desirable for x in held_out], num_steps)


@dataclass(frozen=True)
class KTOBatch:
    batch: list[Datum]
    batch_desirable: list[bool]


class GetKTOBatch(Stage):
    """The step's `batch_size` examples (the epoch's seeded shuffle, full batches only, so a
    resumed run sees the batches an uninterrupted one would), rendered with their mismatched
    pairs, and their labels."""

    async def run(
        self,
        ctx: Context,
        renderer: Renderer,
        train_examples: list[UnpairedExample],
        data: DataSettings,
        run: RunConfig,
    ) -> KTOBatch:
        epoch, batch_index, indices = batch_for_step(ctx.step, len(train_examples), data.batch_size, run.seed)
        ctx.record({"epoch": epoch, "batch": batch_index, "progress": (ctx.step + 1) / (ctx.total_steps or 1)})
        examples = [train_examples[i] for i in indices]
        return KTOBatch(kto_datums(renderer, examples, data.max_length), [x.desirable for x in examples])


def kto_params(kto: KTOLoss) -> KtoParams:
    return KtoParams(kto.beta, kto.desirable_weight, kto.undesirable_weight)


class SubmitKTOStep(Stage):
    """Submit the KTO forward-backward (one forward of the examples and their mismatched pairs
    through the custom loss) and the optimizer step; do not wait."""

    calls = (TrainingClient.forward_backward_custom, TrainingClient.optim_step)

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        batch: list[Datum],
        batch_desirable: list[bool],
        batch_reference_logprobs: list[torch.Tensor],
        kto: KTOLoss,
        optimizer: OptimizerSettings,
        inflight: Sequence[PendingStep] = (),
    ) -> InFlight:
        loss_fn = make_kto_custom_loss(batch_reference_logprobs, batch_desirable, kto_params(kto))
        return await submit_step(ctx, training_client, batch, loss_fn, optimizer, inflight)


class EvaluateKTO(Stage):
    """Held-out KTO metrics of the current policy against the frozen reference, one forward pass
    (no gradients): `eval/kto_loss`, `eval/kl`, `eval/desirable_reward`,
    `eval/undesirable_reward`, `eval/reward_margin`, `eval/accuracy`."""

    calls = (TrainingClient.forward,)

    async def run(
        self,
        ctx: Context,
        training_client: TrainingClient,
        eval_data: list[Datum],
        eval_desirable: list[bool],
        eval_reference_logprobs: list[torch.Tensor],
        data: DataSettings,
        kto: KTOLoss,
    ) -> None:
        if not eval_data:
            return
        size = 2 * data.batch_size
        futures = [
            await training_client.forward(eval_data[i : i + size], "cross_entropy")
            for i in range(0, len(eval_data), size)
        ]
        logprobs_D = [out["logprobs"].to_torch() for fut in futures for out in (await fut).loss_fn_outputs]
        weights_D = [datum.loss_fn_inputs["weights"].to_torch() for datum in eval_data]
        _, metrics = kto_from_token_logprobs(
            logprobs_D, eval_reference_logprobs, weights_D, eval_desirable, kto_params(kto)
        )
        ctx.record({f"eval/{key}": value for key, value in metrics.items()})


def kto_workflow() -> Workflow:
    """The KTO workflow: the DPO workflow's shape (reference logprobs of step i computed while
    step i-1 trains, evaluation and checkpoints after the current step) on unpaired data."""
    return Workflow(
        name="kto",
        steps=[
            GetTokenizer(),
            MakeRenderer(),
            LoadUnpairedData(),
            CreateTrainingClient(),
            CreateReferenceClient(),
            ComputeReferenceLogprobs(
                "score_held_out_reference",
                keys={"batch": "eval_data", "batch_reference_logprobs": "eval_reference_logprobs"},
            ),
            *pipelined_training(
                [GetKTOBatch(), ComputeReferenceLogprobs(), SubmitKTOStep()], [EvaluateKTO()], loss_fn_metrics
            ),
        ],
        finally_=[CloseBackend()],
    )
