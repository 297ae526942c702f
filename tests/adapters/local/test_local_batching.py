"""Concurrent sampling-client requests run batched, and each caller gets what it would get alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import cast

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.common.tiny import TINY_DIR
from adapters.local.model_loading import load_model
from adapters.local.request_batcher import DEFAULT_BATCH_LIMITS, BatchLimits
from adapters.local.sampling_client import LocalSamplingClient
from adapters.local.serial_executor import SerialExecutor
from kitchen.engine.ports import Tokenizer
from train_core.types import ModelInput, SampleResult, SamplingParams, TokensWithLogprobs

VOCAB = json.loads((TINY_DIR / "config.json").read_text())["vocab_size"]


@dataclass
class CountedModel:
    """The tiny model with a count of its body's forward passes (each batch costs one)."""

    model: torch.nn.Module
    forwards: int = 0

    def count(self, *_: object) -> None:
        self.forwards += 1


@pytest.fixture(scope="module")
def counted() -> CountedModel:
    counted = CountedModel(load_model("tiny", None, seed=0, device=torch.device("cpu")))
    body = cast(Callable[[], torch.nn.Module], counted.model.get_decoder)()  # scoring runs it without the head
    body.register_forward_hook(counted.count)
    return counted


@pytest.fixture
def executor() -> Iterator[SerialExecutor]:
    worker = SerialExecutor("test-sampling")
    yield worker
    worker.shutdown()


def _client(
    counted: CountedModel,
    tokenizer: Tokenizer,
    executor: SerialExecutor,
    limits: BatchLimits = DEFAULT_BATCH_LIMITS,
) -> LocalSamplingClient:
    return LocalSamplingClient(counted.model, tokenizer, executor, seed=0, batch_limits=limits)


def _score(client: LocalSamplingClient, prompts: Sequence[list[int]], together: bool) -> list[list[float | None]]:
    async def main() -> list[list[float | None]]:
        inputs = [ModelInput.from_ints(p) for p in prompts]
        if together:
            return list(await asyncio.gather(*(client.compute_logprobs(i) for i in inputs)))
        return [await client.compute_logprobs(i) for i in inputs]

    return asyncio.run(main())


def _assert_same_scores(batched: list[list[float | None]], alone: list[list[float | None]]) -> None:
    assert [len(s) for s in batched] == [len(s) for s in alone]
    for got, expected in zip(batched, alone, strict=True):
        assert got[0] is None and expected[0] is None
        assert got[1:] == pytest.approx(expected[1:], abs=1e-5)


def test_concurrent_scoring_is_one_forward_with_the_results_of_one_at_a_time(
    counted: CountedModel, tokenizer: Tokenizer, executor: SerialExecutor, token_lists: list[list[int]]
) -> None:
    client = _client(counted, tokenizer, executor)
    prompts = [*token_lists, [7], token_lists[0][:2], *[tokens[::-1] for tokens in token_lists]]
    alone = _score(client, prompts, together=False)
    before = counted.forwards
    batched = _score(client, prompts, together=True)
    assert counted.forwards - before == 1  # the lone token needs no forward
    assert batched[len(token_lists)] == [None]
    _assert_same_scores(batched, alone)


def test_scoring_batches_respect_the_limits(
    counted: CountedModel, tokenizer: Tokenizer, executor: SerialExecutor
) -> None:
    client = _client(counted, tokenizer, executor, BatchLimits(max_sequences=3, max_tokens=20))
    prompts = [[i + 1] * 10 for i in range(5)]  # 10 tokens each: two fit in 20 padded tokens
    alone = _score(client, prompts, together=False)
    before = counted.forwards
    batched = _score(client, prompts, together=True)
    assert counted.forwards - before == 3
    _assert_same_scores(batched, alone)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=24), min_size=1, max_size=10))
def test_batched_scores_equal_one_at_a_time_scores_for_any_prompts(
    counted: CountedModel, tokenizer: Tokenizer, prompts: list[list[int]]
) -> None:
    executor = SerialExecutor("test-sampling")
    try:
        client = _client(counted, tokenizer, executor)
        _assert_same_scores(_score(client, prompts, together=True), _score(client, prompts, together=False))
    finally:
        executor.shutdown()


Call = tuple[list[int], int, SamplingParams]


def _sample(client: LocalSamplingClient, calls: Sequence[Call], together: bool) -> list[list[TokensWithLogprobs]]:
    async def main() -> list[SampleResult]:
        requests = [(ModelInput.from_ints(prompt), n, params) for prompt, n, params in calls]
        if together:
            return list(await asyncio.gather(*(client.sample(*r) for r in requests)))
        return [await client.sample(*r) for r in requests]

    return [result.sequences for result in asyncio.run(main())]


def _assert_same_samples(batched: list[list[TokensWithLogprobs]], alone: list[list[TokensWithLogprobs]]) -> None:
    for got, expected in zip(batched, alone, strict=True):
        assert [(s.tokens, s.stop_reason) for s in got] == [(s.tokens, s.stop_reason) for s in expected]
        for got_sequence, expected_sequence in zip(got, expected, strict=True):
            assert got_sequence.logprobs == pytest.approx(expected_sequence.logprobs, abs=1e-5)


def _seeded_calls(token_lists: list[list[int]], params: SamplingParams) -> list[Call]:
    """One call per prompt, with different sample counts and each its own seed."""
    counts = (3, 1, 4, 2)
    return [
        (tokens, n, replace(params, seed=100 + i))
        for i, (tokens, n) in enumerate(zip(token_lists, counts, strict=True))
    ]


def _check_one_decode_matching_alone(client: LocalSamplingClient, counted: CountedModel, calls: list[Call]) -> None:
    alone = _sample(client, calls, together=False)
    before = counted.forwards
    batched = _sample(client, calls, together=True)
    longest = max(len(s.tokens) for sequences in alone for s in sequences)
    assert counted.forwards - before == longest  # the prefill, then one forward per further token
    _assert_same_samples(batched, alone)


@pytest.mark.parametrize(
    "params",
    [SamplingParams(max_tokens=6, temperature=0.8, top_p=0.9, top_k=50), SamplingParams(max_tokens=6, temperature=0.0)],
    ids=["truncated", "greedy"],
)
def test_concurrent_seeded_samples_are_one_decode_and_match_each_call_alone(
    counted: CountedModel,
    tokenizer: Tokenizer,
    executor: SerialExecutor,
    token_lists: list[list[int]],
    params: SamplingParams,
) -> None:
    client = _client(counted, tokenizer, executor)
    _check_one_decode_matching_alone(client, counted, _seeded_calls(token_lists, params))


def test_concurrent_samples_that_stop_at_different_steps_match_each_call_alone(
    counted: CountedModel, tokenizer: Tokenizer, executor: SerialExecutor, token_lists: list[list[int]]
) -> None:
    client = _client(counted, tokenizer, executor)
    free = _sample(client, _seeded_calls(token_lists, SamplingParams(max_tokens=10)), together=False)
    # Each call's first sample stops at a different step; most other rows run to max_tokens.
    stop = [sequences[0].tokens[2 + i] for i, sequences in enumerate(free)]
    calls = _seeded_calls(token_lists, SamplingParams(max_tokens=10, stop=stop))
    _check_one_decode_matching_alone(client, counted, calls)
    reasons = {s.stop_reason for sequences in _sample(client, calls, together=True) for s in sequences}
    assert reasons == {"stop", "length"}


def test_concurrent_unseeded_samples_draw_seeds_in_call_order(
    counted: CountedModel, tokenizer: Tokenizer, token_lists: list[list[int]]
) -> None:
    """Unseeded calls get the client's next seeds in the order they were made, batched or not."""
    params = SamplingParams(max_tokens=5)
    calls = [(tokens, 2, params) for tokens in token_lists]
    results = []
    for together in (False, True):
        executor = SerialExecutor("test-sampling")
        try:
            results.append(_sample(_client(counted, tokenizer, executor), calls, together))
        finally:
            executor.shutdown()
    alone, batched = results
    _assert_same_samples(batched, alone)
    assert len({tuple(s.tokens) for sequences in alone for s in sequences}) > 1


def test_samples_with_different_params_run_in_separate_decodes(
    counted: CountedModel, tokenizer: Tokenizer, executor: SerialExecutor, token_lists: list[list[int]]
) -> None:
    client = _client(counted, tokenizer, executor)
    calls = [
        (token_lists[0], 2, SamplingParams(max_tokens=4, seed=1)),
        (token_lists[1], 2, SamplingParams(max_tokens=4, seed=2, temperature=0.5)),
        (token_lists[2], 2, SamplingParams(max_tokens=4, seed=3)),
    ]
    alone = _sample(client, calls, together=False)
    before = counted.forwards
    batched = _sample(client, calls, together=True)
    assert counted.forwards - before == 2 * 4  # calls 0 and 2 together, call 1 alone
    _assert_same_samples(batched, alone)


def test_without_max_tokens_only_prompts_with_the_same_budget_share_a_decode(
    counted: CountedModel, tokenizer: Tokenizer, executor: SerialExecutor
) -> None:
    """Without max_tokens a prompt may decode up to the context length, so a shorter prompt has a
    larger budget; rows of one batch must not decode past their own context."""
    client = _client(counted, tokenizer, executor)
    first_token_stops = SamplingParams(stop=list(range(VOCAB)))  # every row stops after one token
    before = counted.forwards
    _sample(client, [([5, 6], 2, first_token_stops), ([7, 8], 1, first_token_stops)], together=True)
    assert counted.forwards - before == 1
    _sample(client, [([5, 6], 2, first_token_stops), ([7, 8, 9], 1, first_token_stops)], together=True)
    assert counted.forwards - before == 1 + 2
