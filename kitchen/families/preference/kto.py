"""KTO's and BCO's stages and workflow: load unpaired examples, take a step's examples (with their
mismatched pairs, for KTO's reference point), score them with the frozen reference, submit the
step, evaluate. BCO's running reward mean is run state, saved with each checkpoint. The math lives
in `train_core.preference.kto` and `train_core.preference.bco`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kitchen.engine.config.run import RunConfig
from kitchen.engine.config.sections import section_of
from kitchen.engine.context import Context
from kitchen.engine.errors import DataError
from kitchen.engine.ports import TrainingClient
from kitchen.engine.stage import Persisted, Stage
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
from kitchen.families.common.training import InFlight, PendingStep, forward_logprobs, loss_fn_metrics, submit_step
from kitchen.families.preference.reward_model import comparison_records
from kitchen.families.preference.settings import ComparisonData, KTOLoss
from kitchen.families.preference.stages import ComputeReferenceLogprobs, report_skipped
from train_core.batching import batch_for_step
from train_core.errors import DataFormatError
from train_core.preference.bco import RunningMean, bco_from_token_logprobs, make_bco_custom_loss
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


def kto_datums(
    renderer: Renderer, examples: Sequence[UnpairedExample], max_length: int | None, mismatched: bool = True
) -> list[Datum]:
    """`[x_0 .. x_{B-1}, kl_0 .. kl_{B-1}]`: the examples, then each prompt i with completion i-1
    (cyclically), the mismatched pairs whose log-ratios estimate KTO's reference point; without
    `mismatched` (BCO, which has no such point), the examples alone."""
    try:
        own = [completion_datum(renderer, x.prompt, x.completion, max_length) for x in examples]
        if not mismatched:
            return own
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

    async def run(self, ctx: Context, renderer: Renderer, data: ComparisonData, kto: KTOLoss) -> UnpairedData:
        train = read_unpaired(ctx, renderer, data, data.dataset, "train")
        num_steps = data.num_steps(len(train), "usable examples", data.dataset)
        held_out = read_unpaired(ctx, renderer, data, data.eval_dataset, "eval") if data.eval_dataset else []
        mismatched = kto.loss_type == "kto"
        if len(held_out) == 1 and mismatched:
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
        eval_data = kto_datums(renderer, held_out, data.max_length, mismatched) if held_out else []
        return UnpairedData(train, eval_data, [x.desirable for x in held_out], num_steps)


@dataclass(frozen=True)
class KTOBatch:
    batch: list[Datum]
    batch_desirable: list[bool]


class GetKTOBatch(Stage):
    """The step's `batch_size` examples (the epoch's seeded shuffle, full batches only, so a
    resumed run sees the batches an uninterrupted one would), rendered (with their mismatched
    pairs for KTO), and their labels."""

    async def run(
        self,
        ctx: Context,
        renderer: Renderer,
        train_examples: list[UnpairedExample],
        data: DataSettings,
        run: RunConfig,
        kto: KTOLoss,
    ) -> KTOBatch:
        epoch, batch_index, indices = batch_for_step(ctx.step, len(train_examples), data.batch_size, run.seed)
        ctx.record({"epoch": epoch, "batch": batch_index, "progress": (ctx.step + 1) / (ctx.total_steps or 1)})
        examples = [train_examples[i] for i in indices]
        datums = kto_datums(renderer, examples, data.max_length, mismatched=kto.loss_type == "kto")
        return KTOBatch(datums, [x.desirable for x in examples])


def kto_params(kto: KTOLoss) -> KtoParams:
    return KtoParams(kto.beta, kto.desirable_weight, kto.undesirable_weight)


@dataclass(frozen=True)
class RunningMeanOut:
    bco_running_mean: Persisted[RunningMean]


class StartRunningMean(Stage):
    """BCO's running mean of the rewards (its `delta`): a new one, or the one the checkpoint a run
    resumes from saved. The steps' losses update it in place as the backend runs them, in order,
    and every step is awaited before a checkpoint, so a checkpoint holds the mean of exactly the
    steps it contains."""

    async def run(self, bco_running_mean: RunningMean | None = None) -> RunningMeanOut:
        return RunningMeanOut(bco_running_mean if bco_running_mean is not None else RunningMean())


class SubmitKTOStep(Stage):
    """Submit the KTO or BCO forward-backward (one forward of the examples, and for KTO their
    mismatched pairs, through the custom loss) and the optimizer step; do not wait."""

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
        bco_running_mean: RunningMean | None = None,
    ) -> InFlight:
        if kto.loss_type == "bco":
            assert bco_running_mean is not None  # kto_workflow("bco") starts it
            loss_fn = make_bco_custom_loss(batch_reference_logprobs, batch_desirable, kto.beta, bco_running_mean)
        else:
            loss_fn = make_kto_custom_loss(batch_reference_logprobs, batch_desirable, kto_params(kto))
        return await submit_step(ctx, training_client, batch, loss_fn, optimizer, inflight)


class EvaluateKTO(Stage):
    """Held-out KTO (or BCO) metrics of the current policy against the frozen reference, one
    forward pass (no gradients): `eval/kto_loss`, `eval/kl` (BCO: `eval/bco_loss`, `eval/delta`,
    the running mean as training left it), `eval/desirable_reward`, `eval/undesirable_reward`,
    `eval/reward_margin`, `eval/accuracy`."""

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
        bco_running_mean: RunningMean | None = None,
    ) -> None:
        if not eval_data:
            return
        size = 2 * data.batch_size
        logprobs_D, weights_D = await forward_logprobs(training_client, eval_data, size)
        if kto.loss_type == "bco":
            assert bco_running_mean is not None  # kto_workflow("bco") starts it
            _, metrics = bco_from_token_logprobs(
                logprobs_D, eval_reference_logprobs, weights_D, eval_desirable, kto.beta, bco_running_mean, update=False
            )
        else:
            _, metrics = kto_from_token_logprobs(
                logprobs_D, eval_reference_logprobs, weights_D, eval_desirable, kto_params(kto)
            )
        ctx.record({f"eval/{key}": value for key, value in metrics.items()})


def kto_workflow(loss_type: str = "kto") -> Workflow:
    """The KTO workflow: the DPO workflow's shape (reference logprobs of step i computed while
    step i-1 trains, evaluation and checkpoints after the current step) on unpaired data; with
    `loss_type` bco (`kto.loss_type`), BCO's, which starts its running reward mean first."""
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
            *([StartRunningMean()] if loss_type == "bco" else []),
            *pipelined_training(
                [GetKTOBatch(), ComputeReferenceLogprobs(), SubmitKTOStep()], [EvaluateKTO()], loss_fn_metrics
            ),
        ],
        finally_=[CloseBackend()],
    )
