"""Token usage counted at the ports: prompt (prefill), sampled and trained tokens per step in the
metrics, and a step's estimated cost from a backend's price table."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from adapters.noop import NoopBackend
from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.ports import (
    FollowsWeightUpdates,
    SamplesGeometricMixture,
    ScoresPromptDetail,
    SelectsLoraLayers,
)
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.metrics import read_metrics
from kitchen.engine.usage import COST_KEY, USAGE_KEYS, TokenPrices, UsageMeter
from train_core.supervised import datum_from_tokens_weights
from train_core.types import ModelInput, SamplingParams

PRICES = TokenPrices(prompt=0.5, sampled=2.0, trained=3.0)


def test_meter_counts_each_kind_of_token_at_the_clients() -> None:
    backend = NoopBackend(seed=0)
    meter = UsageMeter(PRICES)
    service = meter.wrap(backend)

    async def use() -> int:  # input tokens are the datum's tokens but the last
        trainer = await service.create_training_client("tiny", lora_rank=4)
        data = [
            datum_from_tokens_weights([1, 2, 3, 4, 5], [0, 1, 1, 1, 1]),
            datum_from_tokens_weights([1, 2, 3], [1, 1, 1]),
        ]
        await (await trainer.forward_backward(data, "cross_entropy"))  # 4 + 2 input tokens
        await (await trainer.forward(data[:1], "cross_entropy"))  # 4 read
        sampler = await trainer.save_weights_and_get_sampling_client("w")
        result = await sampler.sample(ModelInput.from_ints([7, 8, 9]), 2, SamplingParams(max_tokens=5, seed=1))
        await sampler.compute_logprobs(ModelInput.from_ints([7, 8]))
        return sum(len(sequence.tokens) for sequence in result.sequences)

    sampled = asyncio.run(use())
    assert sampled > 0
    step = meter.take_step()
    assert [step[key] for key in USAGE_KEYS] == [4 + 3 + 2, sampled, 6]
    assert step[COST_KEY] == pytest.approx((9 * 0.5 + sampled * 2.0 + 6 * 3.0) / 1e6)
    assert meter.take_step() == dict.fromkeys((*USAGE_KEYS, COST_KEY), 0.0)  # counts are per step
    assert meter.totals()["trained_tokens"] == 6


def test_metered_clients_keep_the_backends_optional_calls() -> None:
    backend = NoopBackend(seed=0)
    service = UsageMeter().wrap(backend)

    async def clients() -> tuple[object, object]:
        inner = await backend.create_sampling_client(base_model="tiny")
        return await service.create_sampling_client(base_model="tiny"), inner

    metered, inner = asyncio.run(clients())
    assert service.name == "noop"
    assert isinstance(service, SelectsLoraLayers) == isinstance(backend, SelectsLoraLayers)
    for protocol in (ScoresPromptDetail, FollowsWeightUpdates, SamplesGeometricMixture):
        assert isinstance(metered, protocol) == isinstance(inner, protocol)
    # samplers check the class once (`kitchen.families.rl.weight_feed`)
    assert issubclass(type(metered), FollowsWeightUpdates) == issubclass(type(inner), FollowsWeightUpdates)


def test_a_metered_mixture_sample_hands_the_backend_its_own_reference_and_is_counted() -> None:
    """The backend mixes with a client it made (noop refuses anything else): the metered proxy
    passes the reference's inner client and counts the mixture's sampled tokens."""
    meter = UsageMeter()
    service = meter.wrap(NoopBackend(seed=0))

    async def use() -> int:
        policy = await service.create_sampling_client(base_model="tiny")
        reference = await service.create_sampling_client(base_model="tiny")
        assert isinstance(policy, SamplesGeometricMixture)
        params = SamplingParams(max_tokens=5, seed=1)
        result = await policy.sample_mixture(ModelInput.from_ints([7, 8, 9]), 2, params, reference, 0.5)
        return sum(len(sequence.tokens) for sequence in result.sequences)

    sampled = asyncio.run(use())
    assert sampled > 0
    step = meter.take_step()
    assert [step[key] for key in USAGE_KEYS] == [3, sampled, 0]


def _sl_run(tmp_path: Path, backend: NoopBackend) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    recipe = get_recipe("sl_basic")
    overrides = ["backend=noop", f"log_path={tmp_path}", "data.max_steps=4", "eval.every=2", "data.batch_size=8"]
    config = load_config(recipe.config_cls, None, overrides)
    run_dir = run_recipe(recipe, config, progress=False, backend=backend)
    return read_metrics(run_dir.metrics), [json.loads(line) for line in run_dir.events.read_text().splitlines()]


def test_each_steps_row_has_its_token_usage(tmp_path: Path) -> None:
    rows, events = _sl_run(tmp_path, NoopBackend(seed=0, checkpoint_dir=tmp_path / "checkpoints"))
    assert len(rows) == 4
    # the step's trained tokens are its batch's (what the step metrics count from the batch)
    assert all(row["usage/trained_tokens"] == row["num_tokens"] > 0 for row in rows)
    assert all(row["usage/sampled_tokens"] == 0 for row in rows)  # supervised: nothing sampled
    # held-out NLL is a forward pass: read, not trained, on the evaluation steps only
    assert [row["usage/prompt_tokens"] > 0 for row in rows] == ["eval/nll" in row for row in rows]
    assert all(COST_KEY not in row for row in rows)  # no price table: no cost
    # the run's total: its steps' rows and the final evaluation after the last step
    total = next(e for e in events if e.get("event") == "run.usage")
    assert total["trained_tokens"] == sum(row["usage/trained_tokens"] for row in rows)
    assert total["prompt_tokens"] >= sum(row["usage/prompt_tokens"] for row in rows)


def test_a_backend_with_prices_logs_each_steps_estimated_cost(tmp_path: Path) -> None:
    backend = NoopBackend(seed=0, checkpoint_dir=tmp_path / "checkpoints")
    backend.token_prices = PRICES  # type: ignore[attr-defined]  # what tinker.prices gives the Tinker backend
    rows, _ = _sl_run(tmp_path, backend)
    for row in rows:
        prompt, sampled, trained = (row[key] for key in USAGE_KEYS)
        assert row[COST_KEY] > 0
        assert row[COST_KEY] == pytest.approx((prompt * 0.5 + sampled * 2.0 + trained * 3.0) / 1e6)
