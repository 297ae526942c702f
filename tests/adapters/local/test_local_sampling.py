"""Sampling: seeds, stop conditions, truncation, temperature, and logprob consistency with training."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from adapters.local import LocalBackend
from adapters.local.model_loading import load_model
from adapters.local.token_draw import truncate_logprobs
from kitchen.engine.errors import ConfigError, DataError
from kitchen.engine.ports import SamplingClient, Tokenizer
from train_core.types import AdamParams, Datum, ModelInput, SamplingParams, TensorData, TokensWithLogprobs

PROMPT = ModelInput.from_ints([8, 685, 245, 377, 325, 267])


def _sample(
    backend: LocalBackend, params: SamplingParams, num_samples: int = 3, prompt: ModelInput = PROMPT
) -> list[TokensWithLogprobs]:
    async def run() -> list[TokensWithLogprobs]:
        client = await backend.create_sampling_client(base_model="tiny")
        return (await client.sample(prompt, num_samples, params)).sequences

    return asyncio.run(run())


def test_same_seed_same_samples_different_seed_different_samples(backend: LocalBackend) -> None:
    first = _sample(backend, SamplingParams(max_tokens=12, seed=3))
    again = _sample(backend, SamplingParams(max_tokens=12, seed=3))
    other = _sample(backend, SamplingParams(max_tokens=12, seed=4))
    assert first == again
    assert [s.tokens for s in first] != [s.tokens for s in other]
    assert len({tuple(s.tokens) for s in first}) == 3  # the samples of one call differ from each other


def test_unseeded_requests_differ_but_a_backend_seed_reproduces_them(tmp_path: Path) -> None:
    async def run(seed: int) -> list[list[int]]:
        backend = LocalBackend(checkpoint_dir=tmp_path, device="cpu", seed=seed)
        client = await backend.create_sampling_client(base_model="tiny")
        params = SamplingParams(max_tokens=8)
        first = (await client.sample(PROMPT, 1, params)).sequences[0].tokens
        second = (await client.sample(PROMPT, 1, params)).sequences[0].tokens
        await backend.close()
        return [first, second]

    run_a, run_b = asyncio.run(run(0)), asyncio.run(run(0))
    assert run_a == run_b
    assert run_a[0] != run_a[1]


def test_max_tokens_ends_with_length(backend: LocalBackend) -> None:
    for sequence in _sample(backend, SamplingParams(max_tokens=7, seed=0)):
        assert len(sequence.tokens) == len(sequence.logprobs) == 7
        assert sequence.stop_reason == "length"


def test_stop_token_ids_end_each_sample_at_the_first_hit_and_keep_it(backend: LocalBackend) -> None:
    free = _sample(backend, SamplingParams(max_tokens=16, seed=11))
    stop_id = free[0].tokens[4]
    stopped = _sample(backend, SamplingParams(max_tokens=16, seed=11, stop=[stop_id]))
    for unstopped, sequence in zip(free, stopped, strict=True):
        if stop_id in unstopped.tokens:
            end = unstopped.tokens.index(stop_id) + 1
            assert sequence.tokens == unstopped.tokens[:end]
            assert sequence.logprobs == unstopped.logprobs[:end]
            assert sequence.stop_reason == "stop"
        else:  # other rows are untouched: finished rows do not shift the random stream
            assert sequence == unstopped
    assert stopped[0].tokens[-1] == stop_id


def test_stop_strings_end_at_the_token_that_completes_them(backend: LocalBackend, tokenizer: Tokenizer) -> None:
    free = _sample(backend, SamplingParams(max_tokens=16, seed=5), num_samples=1)[0]
    text = tokenizer.decode(free.tokens, skip_special_tokens=False)
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    assert stop
    end = next(
        i + 1
        for i in range(len(free.tokens))
        if stop in tokenizer.decode(free.tokens[: i + 1], skip_special_tokens=False)
    )
    stopped = _sample(backend, SamplingParams(max_tokens=16, seed=5, stop=[stop]), num_samples=1)[0]
    assert stopped.tokens == free.tokens[:end]
    assert stopped.stop_reason == "stop"
    assert stop in tokenizer.decode(stopped.tokens, skip_special_tokens=False)


def test_greedy_top_k_1_and_tiny_top_p_all_pick_the_most_likely_token(backend: LocalBackend) -> None:
    greedy = _sample(backend, SamplingParams(max_tokens=10, temperature=0.0), num_samples=2)
    top_k = _sample(backend, SamplingParams(max_tokens=10, seed=1, top_k=1), num_samples=2)
    top_p = _sample(backend, SamplingParams(max_tokens=10, seed=2, top_p=1e-6), num_samples=2)
    assert greedy[0].tokens == greedy[1].tokens == top_k[0].tokens == top_p[1].tokens
    # Logprobs are reported before truncation: the chosen token does not get probability 1.
    assert all(lp < 0 for lp in top_k[0].logprobs)


# Logits at least 0.1 apart, so the ranking has no (near-)ties.
_distinct_logits = st.lists(st.integers(-50, 50), min_size=2, max_size=12, unique=True).map(
    lambda values: [v / 10 for v in values]
)


def _kept(logits: list[float], top_k: int, top_p: float) -> set[int]:
    logprobs_1V = torch.log_softmax(torch.tensor([logits], dtype=torch.float64), -1)
    kept_V = truncate_logprobs(logprobs_1V, top_k, top_p)[0]
    return {i for i in range(len(logits)) if kept_V[i] > float("-inf")}


@given(_distinct_logits, st.integers(min_value=1, max_value=14))
def test_top_k_keeps_exactly_the_k_most_likely_tokens(logits: list[float], top_k: int) -> None:
    ranked = sorted(range(len(logits)), key=lambda i: -logits[i])
    assert _kept(logits, top_k, 1.0) == set(ranked[:top_k])


@given(_distinct_logits, st.floats(min_value=0.01, max_value=0.99))
def test_top_p_keeps_the_smallest_set_of_best_tokens_reaching_p(logits: list[float], top_p: float) -> None:
    probs = torch.softmax(torch.tensor(logits, dtype=torch.float64), -1).tolist()
    ranked = sorted(range(len(logits)), key=lambda i: -logits[i])
    cumulative = [sum(probs[i] for i in ranked[: n + 1]) for n in range(len(ranked))]
    assume(all(abs(c - top_p) > 1e-9 for c in cumulative))
    size = next(n + 1 for n, c in enumerate(cumulative) if c >= top_p)
    assert _kept(logits, -1, top_p) == set(ranked[:size])


def test_logprobs_under_temperature_are_of_the_scaled_distribution(backend: LocalBackend) -> None:
    temperature = 0.7
    sequence = _sample(backend, SamplingParams(max_tokens=6, seed=9, temperature=temperature), num_samples=1)[0]
    model = load_model("tiny", None, seed=0, device=torch.device("cpu"))
    tokens = PROMPT.to_ints() + sequence.tokens
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0, PROMPT.length - 1 : -1]
    expected = torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(sequence.tokens)[:, None])
    assert sequence.logprobs == pytest.approx(expected.squeeze(-1).tolist(), abs=1e-5)


@pytest.mark.parametrize("lora_rank", [None, 4])
def test_sample_compute_logprobs_and_training_logprobs_agree(
    backend: LocalBackend, sl_batch: list[Datum], lora_rank: int | None
) -> None:
    """On the same (trained, so non-trivial) weights the three paths agree to 1e-5."""

    async def run() -> tuple[list[float], list[float | None], list[float]]:
        client = await backend.create_training_client("tiny", lora_rank=lora_rank)
        for _ in range(3):
            await client.forward_backward(sl_batch, "cross_entropy")
            await client.optim_step(AdamParams(learning_rate=1e-2))
        sampler = await client.save_weights_and_get_sampling_client()
        sampled = (await sampler.sample(PROMPT, 4, SamplingParams(max_tokens=20, seed=0))).sequences
        scored = [s.tokens for s in sampled]
        full = PROMPT.to_ints() + scored[0]
        computed = await sampler.compute_logprobs(ModelInput.from_ints(full))
        data = [
            Datum(
                ModelInput.from_ints(PROMPT.to_ints() + tokens[:-1]),
                {
                    "target_tokens": TensorData.from_list(PROMPT.to_ints()[1:] + tokens, "int64"),
                    "weights": TensorData.from_list([1.0] * (PROMPT.length - 1 + len(tokens)), "float32"),
                },
            )
            for tokens in scored
        ]
        trained = await (await client.forward_backward(data, "cross_entropy"))
        return sampled[0].logprobs, computed, list(trained.loss_fn_outputs[0]["logprobs"].tolist())

    sampled, computed, trained = asyncio.run(run())
    completion = slice(PROMPT.length, None)
    assert computed[0] is None
    assert computed[completion] == pytest.approx(sampled, abs=1e-5)
    assert trained[PROMPT.length - 1 :] == pytest.approx(sampled, abs=1e-5)
    assert trained == pytest.approx(computed[1:], abs=1e-5)


def test_bad_sampling_requests_are_errors(backend: LocalBackend) -> None:
    async def run(client: SamplingClient) -> None:
        with pytest.raises(ConfigError, match="num_samples must be >= 1"):
            await client.sample(PROMPT, 0, SamplingParams(max_tokens=2))
        with pytest.raises(ConfigError, match="top_p must be in"):
            await client.sample(PROMPT, 1, SamplingParams(max_tokens=2, top_p=0.0))
        with pytest.raises(ConfigError, match="top_k must be -1"):
            await client.sample(PROMPT, 1, SamplingParams(max_tokens=2, top_k=0))
        with pytest.raises(ConfigError, match="all strings or all token ids"):
            await client.sample(PROMPT, 1, SamplingParams(max_tokens=2, stop=["a", 3]))  # type: ignore[arg-type]
        with pytest.raises(DataError, match="prompt is empty"):
            await client.sample(ModelInput.empty(), 1, SamplingParams(max_tokens=2))
        with pytest.raises(DataError, match="outside the vocabulary"):
            await client.compute_logprobs(ModelInput.from_ints([1, 99999]))
        assert await client.compute_logprobs(ModelInput.from_ints([5])) == [None]

    async def main() -> None:
        await run(await backend.create_sampling_client(base_model="tiny"))

    asyncio.run(main())
