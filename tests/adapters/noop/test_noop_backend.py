"""Noop-specific behaviour: simulated latency, the call log, seeding, and its own checkpoints."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from adapters.noop import NoopBackend, NoopCall
from kitchen.engine.errors import ConfigError, KitchenError
from kitchen.testing.contract.data import BASE_MODEL, sft_batch, train_step
from train_core.types import AdamParams, ModelInput, SamplingParams

LATENCY_S = 0.2


def test_sample_latency_delays_and_concurrent_calls_overlap() -> None:
    backend = NoopBackend(latency={"sample": LATENCY_S})
    prompt = ModelInput.from_ints([5, 6, 7])
    params = SamplingParams(max_tokens=4, seed=0)

    async def main() -> tuple[float, float]:
        sampler = await backend.create_sampling_client(base_model=BASE_MODEL)
        start = time.perf_counter()
        await sampler.sample(prompt, 1, params)
        one = time.perf_counter() - start
        start = time.perf_counter()
        await asyncio.gather(*(sampler.sample(prompt, 1, params) for _ in range(4)))
        return one, time.perf_counter() - start

    one, four_concurrent = asyncio.run(main())
    assert one >= LATENCY_S
    assert LATENCY_S <= four_concurrent < 2 * LATENCY_S  # overlapped, not 4 * LATENCY_S


def test_training_latency_is_serial_per_client_and_submit_returns_at_once() -> None:
    backend = NoopBackend(latency={"optim_step": LATENCY_S})

    async def main() -> tuple[float, float]:
        client = await backend.create_training_client(BASE_MODEL)
        start = time.perf_counter()
        futures = [await client.optim_step(AdamParams()) for _ in range(3)]
        submitted = time.perf_counter() - start
        await asyncio.gather(*futures)
        return submitted, time.perf_counter() - start

    submitted, finished = asyncio.run(main())
    assert submitted < LATENCY_S / 2
    assert finished >= 3 * LATENCY_S  # requests of one client never overlap


def test_sampling_overlaps_with_training() -> None:
    """Training and sampling latencies overlap, which is what async RL modes exploit."""
    backend = NoopBackend(latency={"forward_backward": LATENCY_S, "sample": LATENCY_S})
    data = sft_batch(backend)

    async def main() -> float:
        client = await backend.create_training_client(BASE_MODEL)
        sampler = await client.save_weights_and_get_sampling_client()
        start = time.perf_counter()
        training = await client.forward_backward(data, "cross_entropy")
        await asyncio.gather(training, sampler.sample(data[0].model_input, 1, SamplingParams(max_tokens=4)))
        return time.perf_counter() - start

    assert LATENCY_S <= asyncio.run(main()) < 2 * LATENCY_S


def test_unknown_latency_kind_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="sampel"):
        NoopBackend(latency={"sampel": 1.0})


def test_calls_are_recorded_in_order_with_summaries() -> None:
    backend = NoopBackend()
    data = sft_batch(backend)

    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL, lora_rank=8)
        await train_step(client, data)
        sampler = await client.save_weights_and_get_sampling_client()
        await sampler.sample(ModelInput.from_ints([1, 2]), 2, SamplingParams(max_tokens=3))

    asyncio.run(main())
    assert [(c.client_kind, c.method) for c in backend.calls] == [
        ("service", "create_training_client"),
        ("training", "forward_backward"),
        ("training", "optim_step"),
        ("training", "save_weights_and_get_sampling_client"),
        ("sampling", "sample"),
    ]
    assert backend.calls[0].summary["lora_rank"] == 8
    assert backend.calls[1].summary == {
        "client": "training-0",
        "loss_fn": "cross_entropy",
        "loss_fn_config": {},
        "num_data": len(data),
        "num_tokens": sum(d.model_input.length for d in data),
    }
    kind, method, summary = backend.calls[4]
    assert isinstance(backend.calls[4], NoopCall)
    assert (kind, method) == ("sampling", "sample")
    assert summary["version"] == 1 and summary["num_samples"] == 2 and summary["max_tokens"] == 3


def _run_session(seed: int) -> tuple[list[list[float]], list[list[int]]]:
    """Train a step, then sample without a seed twice: everything a seeded backend decides."""
    backend = NoopBackend(seed=seed)
    data = sft_batch(backend)

    async def main() -> tuple[list[list[float]], list[list[int]]]:
        client = await backend.create_training_client(BASE_MODEL)
        await train_step(client, data)
        output = await (await client.forward(data, "cross_entropy"))
        sampler = await client.save_weights_and_get_sampling_client()
        prompt = data[0].model_input
        samples = [await sampler.sample(prompt, 2, SamplingParams(max_tokens=16)) for _ in range(2)]
        tokens = [s.tokens for result in samples for s in result.sequences]
        return [list(map(float, o["logprobs"].data)) for o in output.loss_fn_outputs], tokens

    return asyncio.run(main())


def test_same_seed_same_everything_other_seed_differs() -> None:
    first, again, other = _run_session(0), _run_session(0), _run_session(1)
    assert first == again
    assert first[0] != other[0] and first[1] != other[1]
    assert first[1][0:2] != first[1][2:4]  # unseeded calls on one sampler differ from each other


def test_checkpoint_dir_lets_a_new_backend_resume(tmp_path: Path) -> None:
    data = sft_batch(NoopBackend())

    async def first_run() -> tuple[str, list[float]]:
        client = await NoopBackend(checkpoint_dir=tmp_path).create_training_client(BASE_MODEL)
        await train_step(client, data)
        path = await (await client.save_state("000001"))
        output = await (await client.forward(data, "cross_entropy"))
        return path, list(map(float, output.loss_fn_outputs[0]["logprobs"].data))

    async def second_run(path: str) -> list[float]:
        client = await NoopBackend(checkpoint_dir=tmp_path).create_training_client_from_state(path)
        output = await (await client.forward(data, "cross_entropy"))
        return list(map(float, output.loss_fn_outputs[0]["logprobs"].data))

    path, expected = asyncio.run(first_run())
    assert path.startswith("noop://") and (tmp_path / "training-0" / "state" / "000001.json").is_file()
    assert asyncio.run(second_run(path)) == expected


def test_in_memory_saves_are_not_shared_between_backends() -> None:
    async def save() -> str:
        client = await NoopBackend().create_training_client(BASE_MODEL)
        return await (await client.save_state("s"))

    path = asyncio.run(save())
    with pytest.raises(KitchenError, match="in memory"):
        asyncio.run(NoopBackend().create_training_client_from_state(path))


def test_sampler_path_is_not_a_state_path() -> None:
    backend = NoopBackend()

    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL)
        sampler_path = await (await client.save_weights_for_sampler("w"))
        with pytest.raises(KitchenError, match="sampler_weights"):
            await backend.create_training_client_from_state(sampler_path)

    asyncio.run(main())


def test_bad_checkpoint_name_fails_at_the_call() -> None:
    async def main() -> None:
        client = await NoopBackend().create_training_client(BASE_MODEL)
        with pytest.raises(KitchenError, match=r"\.\./escape"):
            await client.save_state("../escape")

    asyncio.run(main())


def test_load_state_refuses_a_different_architecture() -> None:
    async def main() -> None:
        backend = NoopBackend()
        lora = await backend.create_training_client(BASE_MODEL, lora_rank=8)
        path = await (await lora.save_state("lora"))
        full = await backend.create_training_client(BASE_MODEL)
        with pytest.raises(KitchenError, match="lora_rank"):
            await (await full.load_state(path))

    asyncio.run(main())
