"""Saving and loading state, sampler weights, frozen snapshots, and LoRA checkpoints."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from safetensors.torch import load_file

from adapters.local import LocalBackend
from kitchen.engine.errors import ConfigError
from kitchen.engine.ports import MixesSamplerWeights, SamplingClient, TrainingClient
from train_core.types import AdamParams, Datum, ModelInput

ADAM = AdamParams(learning_rate=1e-2)


async def _train(client: TrainingClient, data: Sequence[Datum], steps: int) -> None:
    for _ in range(steps):
        await client.forward_backward(data, "cross_entropy")
        await client.optim_step(ADAM)


async def _logprobs(client: TrainingClient, data: Sequence[Datum]) -> list[list[float]]:
    out = await (await client.forward(data, "cross_entropy"))
    return [list(o["logprobs"].tolist()) for o in out.loss_fn_outputs]


async def _scores(client: SamplingClient, tokens: list[int]) -> list[float | None]:
    return await client.compute_logprobs(ModelInput.from_ints(tokens))


@pytest.mark.parametrize("lora_rank", [None, 4])
def test_resuming_with_optimizer_continues_exactly_and_without_it_does_not(
    backend: LocalBackend, sl_batch: list[Datum], lora_rank: int | None
) -> None:
    async def run() -> tuple[list[list[float]], ...]:
        original = await backend.create_training_client("tiny", lora_rank=lora_rank)
        await _train(original, sl_batch, 2)
        path = await (await original.save_state("step2"))
        await _train(original, sl_batch, 1)
        uninterrupted = await _logprobs(original, sl_batch)

        resumed = await backend.create_training_client_from_state(path, with_optimizer=True)
        await _train(resumed, sl_batch, 1)
        weights_only = await backend.create_training_client_from_state(path, with_optimizer=False)
        await _train(weights_only, sl_batch, 1)
        reloaded = await backend.create_training_client("tiny", lora_rank=lora_rank)
        await (await reloaded.load_state(path, with_optimizer=True))
        await _train(reloaded, sl_batch, 1)
        return (
            uninterrupted,
            await _logprobs(resumed, sl_batch),
            await _logprobs(weights_only, sl_batch),
            await _logprobs(reloaded, sl_batch),
        )

    uninterrupted, resumed, weights_only, reloaded = asyncio.run(run())
    assert resumed == uninterrupted
    assert reloaded == uninterrupted
    # A fresh Adam's first step is ~lr * sign(grad): a visibly different update.
    largest_gap = max(
        abs(a - b)
        for row_a, row_b in zip(weights_only, uninterrupted, strict=True)
        for a, b in zip(row_a, row_b, strict=True)
    )
    assert largest_gap > 1e-3


def test_state_directory_holds_weights_optimizer_and_metadata(backend: LocalBackend, sl_batch: list[Datum]) -> None:
    async def run() -> tuple[Path, Path]:
        client = await backend.create_training_client("tiny", lora_rank=2, seed=5)
        await _train(client, sl_batch, 1)
        state = Path(await (await client.save_state("000001")))
        sampler = Path(await (await client.save_weights_for_sampler("000001")))
        return state, sampler

    state, sampler = asyncio.run(run())
    assert state == backend.checkpoint_dir.resolve() / "weights" / "000001"
    assert sampler == backend.checkpoint_dir.resolve() / "sampler_weights" / "000001"
    assert sorted(p.name for p in state.iterdir()) == ["metadata.json", "optimizer.pt", "weights.safetensors"]
    assert sorted(p.name for p in sampler.iterdir()) == ["metadata.json", "weights.safetensors"]
    metadata = json.loads((state / "metadata.json").read_text())
    assert metadata == {"base_model": "tiny", "lora_rank": 2, "seed": 5, "kind": "state"}
    # LoRA checkpoints hold the adapters only.
    assert all("lora_" in key for key in load_file(sampler / "weights.safetensors"))


def test_sampler_weights_and_snapshots_agree_and_the_snapshot_is_frozen(
    backend: LocalBackend, sl_batch: list[Datum], token_lists: list[list[int]]
) -> None:
    tokens = token_lists[2]

    async def run() -> dict[str, list[float | None]]:
        client = await backend.create_training_client("tiny")
        base = await backend.create_sampling_client(base_model="tiny")
        initial_snapshot = await client.save_weights_and_get_sampling_client()
        scores = {"base": await _scores(base, tokens), "initial": await _scores(initial_snapshot, tokens)}
        await _train(client, sl_batch, 2)
        named_snapshot = await client.save_weights_and_get_sampling_client("trained")
        from_path = await backend.create_sampling_client(
            model_path=str(backend.checkpoint_dir / "sampler_weights" / "trained")
        )
        scores["trained"] = await _scores(named_snapshot, tokens)
        scores["from_path"] = await _scores(from_path, tokens)
        await _train(client, sl_batch, 2)  # later training must not leak into the snapshots
        scores["initial_after"] = await _scores(initial_snapshot, tokens)
        scores["trained_after"] = await _scores(named_snapshot, tokens)
        return scores

    scores = asyncio.run(run())
    assert scores["initial"] == scores["base"]
    assert scores["initial_after"] == scores["initial"]
    assert scores["trained_after"] == scores["trained"]
    assert scores["from_path"] == scores["trained"]
    assert scores["trained"] != scores["initial"]


def test_bad_checkpoint_paths_names_and_mismatches_are_config_errors(
    backend: LocalBackend, sl_batch: list[Datum], tmp_path: Path
) -> None:
    async def run() -> None:
        full = await backend.create_training_client("tiny")
        lora_path = await (await (await backend.create_training_client("tiny", lora_rank=2)).save_state("lora"))
        sampler_path = await (await full.save_weights_for_sampler("sampler"))
        with pytest.raises(ConfigError, match=r"lora_rank=2\) cannot load into a client training 'tiny'"):
            await full.load_state(lora_path)
        with pytest.raises(ConfigError, match="has no optimizer state"):
            await backend.create_training_client_from_state(sampler_path, with_optimizer=True)
        with pytest.raises(ConfigError, match="not a local-backend checkpoint"):
            await backend.create_sampling_client(model_path=str(tmp_path / "missing"))
        with pytest.raises(ConfigError, match=r"checkpoint name '\.\./escape'"):
            await full.save_state("../escape")
        with pytest.raises(ConfigError, match="needs model_path or base_model"):
            await backend.create_sampling_client()

    asyncio.run(run())


def test_mixed_sampler_weights_are_the_parameterwise_mix(backend: LocalBackend, sl_batch: list[Datum]) -> None:
    """TR-DPO's soft reference update: `alpha * current + (1 - alpha) * saved`, every parameter."""

    async def run() -> tuple[Path, Path, Path]:
        client = await backend.create_training_client("tiny", lora_rank=None)
        assert isinstance(client, MixesSamplerWeights)
        before = Path(await (await client.save_weights_for_sampler("before")))
        await _train(client, sl_batch, 2)
        after = Path(await (await client.save_weights_for_sampler("after")))
        mixed = Path(await (await client.save_mixed_weights_for_sampler("mixed", str(before), 0.25)))
        return before, after, mixed

    before, after, mixed = (load_file(p / "weights.safetensors") for p in asyncio.run(run()))
    assert before.keys() == after.keys() == mixed.keys()
    moved = max(float((after[k] - before[k]).abs().max()) for k in before)
    assert moved > 1e-4  # training changed the weights, so the mix is not trivially either
    for key in before:
        expected = 0.25 * after[key] + 0.75 * before[key]
        assert float((mixed[key] - expected).abs().max()) <= 1e-6 * (1.0 + float(expected.abs().max()))


def test_mixing_lora_weights_is_refused(backend: LocalBackend) -> None:
    async def run() -> None:
        client = await backend.create_training_client("tiny", lora_rank=2)
        assert isinstance(client, MixesSamplerWeights)
        path = await (await client.save_weights_for_sampler("before"))
        await client.save_mixed_weights_for_sampler("mixed", path, 0.5)

    with pytest.raises(ConfigError, match="LoRA"):
        asyncio.run(run())
