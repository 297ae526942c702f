"""Properties of the noop backend's fake model: logprob consistency, completions, request ordering."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.common.stop_matcher import StopMatcher
from adapters.common.tiny import TINY_MODEL_NAME
from adapters.common.tokenizer import load_tokenizer
from adapters.noop.completion import end_sequence, generate_completion
from adapters.noop.pseudo_logprobs import (
    LOGPROB_MAX,
    LOGPROB_MIN,
    PseudoWeights,
    advance,
    prompt_logprobs,
    target_logprobs,
    target_logprobs_BL,
    token_logprob,
)
from adapters.noop.runtime import tiny_vocab_ids
from adapters.noop.serial_queue import SerialQueue

tokens_st = st.lists(st.integers(min_value=0, max_value=1499), min_size=1, max_size=40)
weights_st = st.builds(PseudoWeights, st.integers(0, 2**32), st.sampled_from(["tiny", "other"]), st.integers(0, 5))


@given(weights=weights_st, tokens=tokens_st)
def test_prompt_logprobs_are_shifted_target_logprobs_in_range(weights: PseudoWeights, tokens: list[int]) -> None:
    scored = prompt_logprobs(weights, tokens)
    assert len(scored) == len(tokens) and scored[0] is None
    assert scored[1:] == target_logprobs(weights, tokens[:-1], tokens[1:])
    for value in scored[1:]:
        assert value is not None and LOGPROB_MIN <= value <= LOGPROB_MAX
        assert struct.unpack("f", struct.pack("f", value))[0] == value  # exact in float32


@settings(max_examples=30)
@given(weights=weights_st, rows=st.lists(st.tuples(tokens_st, tokens_st), min_size=1, max_size=6))
def test_batch_scoring_walks_the_samplers_states(
    weights: PseudoWeights, rows: list[tuple[list[int], list[int]]]
) -> None:
    """The vectorised scorer of a right-padded batch gives, on each row's real positions, exactly
    what the sampler's one-token-at-a-time `advance` / `token_logprob` walk gives."""
    rows = [(inputs[: len(targets)], targets[: len(inputs)]) for inputs, targets in rows]
    width = max(len(inputs) for inputs, _ in rows)
    padded = [[*inputs, *[7] * (width - len(inputs))] for inputs, _ in rows]
    padded_targets = [[*targets, *[0] * (width - len(targets))] for _, targets in rows]
    scored_BL = target_logprobs_BL(weights, padded, padded_targets)
    for (inputs, targets), scored in zip(rows, scored_BL.tolist(), strict=True):
        state, walked = weights.initial_state(), []
        for token, target in zip(inputs, targets, strict=True):
            state = advance(state, token)
            walked.append(token_logprob(state, target))
        assert scored[: len(inputs)] == walked


@given(weights=weights_st, tokens=st.lists(st.integers(0, 1499), min_size=2, max_size=40))
def test_a_step_changes_the_logprobs(weights: PseudoWeights, tokens: list[int]) -> None:
    assert prompt_logprobs(weights, tokens) != prompt_logprobs(weights.bumped(), tokens)


@settings(max_examples=50, deadline=None)
@given(
    weights=weights_st,
    prompt=tokens_st,
    seed=st.integers(0, 2**63),
    max_tokens=st.integers(1, 80),
    stop=st.lists(st.sampled_from(tiny_vocab_ids()[:40]), max_size=3),
)
def test_completion_honours_max_tokens_and_stop_ids_and_scores_consistently(
    weights: PseudoWeights, prompt: list[int], seed: int, max_tokens: int, stop: list[int]
) -> None:
    tokenizer = load_tokenizer(TINY_MODEL_NAME)
    end_T = end_sequence(stop, tokenizer)
    completion = generate_completion(
        weights, prompt, seed, max_tokens, end_T, StopMatcher(stop, tokenizer), tiny_vocab_ids()
    )
    tokens = completion.tokens
    assert 1 <= len(tokens) <= max_tokens
    stops_at = [i for i, t in enumerate(tokens) if t in stop]
    assert stops_at in ([], [len(tokens) - 1])  # a stop id can only be the last token
    assert (completion.stop_reason == "stop") == bool(stops_at)
    assert completion.stop_reason == "stop" or len(tokens) == max_tokens
    assert completion.logprobs == prompt_logprobs(weights, prompt + tokens)[len(prompt) :]


@pytest.mark.parametrize("stop", [["<|im_end|>"], [" the", "\n\n"]])
def test_completions_end_by_themselves_at_varied_lengths(stop: list[str]) -> None:
    """With a stop condition, the fake model emits it after a seeded natural length."""
    tokenizer = load_tokenizer(TINY_MODEL_NAME)
    matcher, end_T = StopMatcher(stop, tokenizer), end_sequence(stop, tokenizer)
    completions = [
        generate_completion(PseudoWeights(0, "tiny"), [1, 2], seed, 500, end_T, matcher, tiny_vocab_ids())
        for seed in range(30)
    ]
    assert all(c.stop_reason == "stop" for c in completions)
    for completion in completions:
        text = tokenizer.decode(completion.tokens)
        assert any(s in text for s in stop)
        assert not any(s in tokenizer.decode(completion.tokens[:-1]) for s in stop)
    assert len({len(c.tokens) for c in completions}) > 5


def test_serial_queue_runs_in_order_and_survives_a_failure() -> None:
    async def main() -> tuple[list[int], BaseException | None]:
        order: list[int] = []
        queue = SerialQueue()

        def job(i: int, delay: float) -> Callable[[], Awaitable[int]]:
            async def run() -> int:
                await asyncio.sleep(delay)
                if i == 1:
                    raise RuntimeError("request 1 failed")
                order.append(i)
                return i

            return run

        tasks = [queue.submit(job(i, delay)) for i, delay in enumerate([0.03, 0.0, 0.01, 0.0])]
        results = await asyncio.gather(*reversed(tasks), return_exceptions=True)
        failure = results[2]
        assert list(results[:2]) == [3, 2] and results[3] == 0
        return order, failure if isinstance(failure, BaseException) else None

    order, failure = asyncio.run(main())
    assert order == [0, 2, 3]
    assert isinstance(failure, RuntimeError)
