"""kitchen's own tasks, on any data a user has:

- `jsonl`: a JSONL of prompts (`{"prompt": ...}` or `{"messages": [...]}`, other keys reach the
  grader) answered by the model and graded by `grader` (named, or `module:function`);
- `nll`: the per-token negative log-likelihood of a supervised file (chat `messages`, or
  `prompt`/`completion`, or `text` records), as supervised training's `eval/nll` measures it,
  and the same in bits per byte of the scored text (`bits_per_byte`, comparable across
  tokenizers);
- `preference`: on a comparison file, how often the model's implicit reward
  `beta * (logp - logp_ref)` ranks the chosen completion above the rejected one, and the mean
  reward margin, against a reference model (the run's DPO reference, by default).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from pydantic import Field, field_validator

from kitchen.engine.errors import ConfigError, DataError
from kitchen.engine.eval_tasks import EvalModel, EvalSettings, EvalTask, SampleRecord, TaskResult
from kitchen.engine.runs.datasets import load_located_records, prompt_messages
from kitchen.families.common.requests import score_targets
from kitchen.families.evaluation.generation import Item, as_text, evaluate_generation
from kitchen.families.evaluation.graders import resolve_grader
from kitchen.families.supervised.examples import Conversation, PromptCompletion, record_datum
from train_core.eval_stats import Estimate, bootstrap_stderr, mean_with_stderr
from train_core.preference.datasets import Layout, load_comparisons
from train_core.preference.datums import preference_datums
from train_core.preference.dpo import pair_sequence_logprobs
from train_core.renderers.errors import RendererError
from train_core.renderers.train_on_what import TrainOnWhat
from train_core.supervised import bits_per_byte, scored_bytes, sequence_nll


def _graders() -> dict[str, Any]:
    from kitchen.engine.eval_tasks import graders

    return graders()


class JsonlSettings(EvalSettings):
    dataset: str = Field(description="JSONL of prompts: {prompt} or {messages}; other keys reach the grader")
    grader: str = Field(
        description="how replies are graded: a named grader (math, exact, or registered) or module:function"
    )

    @field_validator("grader")
    @classmethod
    def _resolvable(cls, spec: str) -> str:
        resolve_grader(spec, _graders())  # a ConfigError (a ValueError) says what is wrong
        return spec


async def _evaluate_jsonl(model: EvalModel, settings: JsonlSettings) -> TaskResult:
    grader = resolve_grader(settings.grader, _graders())
    items = [
        Item(prompt_messages(record, where, model.renderer.roles, model.renderer.takes_images), record, where)
        for where, record in load_located_records(settings.dataset)
    ]
    return await evaluate_generation(model, items, grader, settings)


class NllSettings(EvalSettings):
    dataset: str = Field(description="supervised JSONL: {messages}, {prompt, completion} or {text} records")
    train_on_what: TrainOnWhat = Field(
        TrainOnWhat.LAST_ASSISTANT_MESSAGE, description="conversations: the messages whose tokens are scored"
    )
    max_length: int | None = Field(None, ge=2, description="cut each example to this many tokens")
    bootstrap_resamples: int = Field(1000, ge=2, description="resamples behind the NLL's standard error")


async def _evaluate_nll(model: EvalModel, settings: NllSettings) -> TaskResult:
    chat, plain = Conversation(settings.train_on_what), PromptCompletion()
    records = load_located_records(settings.dataset)[: settings.limit]
    scored = []
    for where, record in records:
        builder = chat if "messages" in record else plain
        datum = record_datum(builder, record, where, model.tokenizer, model.renderer, settings.max_length)
        if datum is not None:
            scored.append((record, datum))
    if not scored:
        raise DataError(f"{settings.dataset}: no record has a token to score (train_on_what, max_length?)")
    logprobs_D = await score_targets(model.sampler, [datum for _, datum in scored])
    weights_D = [datum.loss_fn_inputs["weights"].to_torch() for _, datum in scored]
    nll_D = sequence_nll(logprobs_D, weights_D)
    tokens_D = [float(w.sum()) for w in weights_D]
    decode = partial(model.tokenizer.decode, skip_special_tokens=True)
    bytes_D = [scored_bytes(datum, decode) for _, datum in scored]

    def token_mean(indices: Any) -> float:
        return sum(nll_D[i] for i in indices) / sum(tokens_D[i] for i in indices)

    def per_byte(indices: Any) -> float:
        return bits_per_byte([nll_D[i] for i in indices], [bytes_D[i] for i in indices])

    everything = range(len(scored))
    stderr = bootstrap_stderr(len(scored), token_mean, settings.bootstrap_resamples, settings.seed)
    bpb_stderr = bootstrap_stderr(len(scored), per_byte, settings.bootstrap_resamples, settings.seed)
    samples = []
    for (record, _), nll, tokens, n_bytes in zip(scored, nll_D, tokens_D, bytes_D, strict=True):
        if "messages" in record:
            prompt, response = as_text(record["messages"][:-1]), str(record["messages"][-1].get("content", ""))
        else:
            prompt, response = str(record.get("prompt") or ""), str(record.get("completion") or record.get("text"))
        samples.append(
            SampleRecord(
                prompt, response, nll / tokens, f"{tokens:g} tokens scored", {"tokens": tokens, "bytes": n_bytes}
            )
        )
    metrics = {
        "nll": Estimate(token_mean(everything), stderr, len(scored)),
        "bits_per_byte": Estimate(per_byte(everything), bpb_stderr, len(scored)),
    }
    return TaskResult(metrics, samples)


def run_dpo_beta(run_config: Mapping[str, Any]) -> float | None:
    """The DPO beta the evaluated run trained with: its `dpo.beta`, or `dpo_beta` in a run
    directory written by kitchen 0.2 (flat keys)."""
    dpo = run_config.get("dpo")
    value = dpo.get("beta") if isinstance(dpo, Mapping) else run_config.get("dpo_beta")
    return float(value) if isinstance(value, int | float) else None


class PreferenceSettings(EvalSettings):
    dataset: str = Field(description="comparison JSONL (the DPO layouts)")
    dataset_layout: Layout = Field("comparisons", description="comparisons | hh_rlhf | ultrafeedback")
    beta: float | None = Field(None, gt=0, description="implicit reward scale; default the run's dpo.beta, else 0.1")
    reference: str = Field(
        "auto",
        description="the model rewards are measured against: auto (the run's DPO reference, else the base "
        "model), none (reference-free: plain sequence logprobs), or a checkpoint path / model name",
    )
    max_length: int | None = Field(None, ge=2, description="cut each side to this many tokens")


async def _evaluate_preferences(model: EvalModel, settings: PreferenceSettings) -> TaskResult:
    import torch

    comparisons, _ = load_comparisons(settings.dataset, settings.dataset_layout, max_length=settings.max_length)
    comparisons = comparisons[: settings.limit]
    if not comparisons:
        raise DataError(f"{settings.dataset}: no usable comparison")
    try:
        data_D = preference_datums(comparisons, model.renderer, settings.max_length)
    except RendererError as exc:
        raise DataError(f"{settings.dataset}: a comparison cannot be rendered: {exc}") from None
    weights_D = [datum.loss_fn_inputs["weights"].to_torch() for datum in data_D]
    chosen_P, rejected_P = pair_sequence_logprobs(await score_targets(model.sampler, data_D), weights_D)
    reference = model.reference if settings.reference == "auto" else settings.reference
    if reference == "none":
        chosen_ref_P = rejected_ref_P = torch.zeros_like(chosen_P)
    elif reference is None:
        raise ConfigError("preference: this target has no reference model; set preference.reference")
    else:
        reference_client = await model.open_sampler(reference)
        chosen_ref_P, rejected_ref_P = pair_sequence_logprobs(await score_targets(reference_client, data_D), weights_D)
    beta = settings.beta or float(run_dpo_beta(model.run_config) or 0.1)
    chosen_reward_P = (beta * (chosen_P - chosen_ref_P)).tolist()
    rejected_reward_P = (beta * (rejected_P - rejected_ref_P)).tolist()
    margins_P = [c - r for c, r in zip(chosen_reward_P, rejected_reward_P, strict=True)]
    samples = []
    for labeled, c, r in zip(comparisons, chosen_reward_P, rejected_reward_P, strict=True):
        chosen, rejected = labeled.chosen_and_rejected()
        samples.append(
            SampleRecord(
                as_text(labeled.comparison.prompt_conversation),
                as_text(chosen),
                c - r,
                "chosen ranked higher" if c > r else "rejected ranked higher or tied",
                {"rejected": as_text(rejected), "chosen_reward": c, "rejected_reward": r},
            )
        )
    metrics = {
        "accuracy": mean_with_stderr([float(m > 0) for m in margins_P]),
        "margin": mean_with_stderr(margins_P),
    }
    return TaskResult(metrics, samples)


JSONL = EvalTask("jsonl", "your JSONL of prompts, graded by a grader (--grader)", _evaluate_jsonl, JsonlSettings)
NLL = EvalTask("nll", "per-token NLL of a supervised JSONL (chat or prompt/completion)", _evaluate_nll, NllSettings)
PREFERENCE = EvalTask(
    "preference",
    "preference accuracy and implicit-reward margin on a comparison JSONL",
    _evaluate_preferences,
    PreferenceSettings,
)
