"""The noop sampler honours temperature, top-k and top-p, reports top-k logprobs, and scores a
prompt's detail (top-k, targets, alternative draws) under its pseudo-model."""

from __future__ import annotations

import asyncio

from adapters.noop import NoopBackend
from adapters.noop.completion import top_tokens
from kitchen.testing.contract.data import BASE_MODEL
from train_core.types import ModelInput, PromptDetail, PromptScores, SampleResult, SamplingParams

PROMPT = ModelInput.from_ints([5, 17, 99, 230])


def sample(params: SamplingParams, n: int = 4) -> SampleResult:
    async def main() -> SampleResult:
        sampler = await NoopBackend().create_sampling_client(base_model=BASE_MODEL)
        return await sampler.sample(PROMPT, n, params)

    return asyncio.run(main())


def test_temperature_zero_and_top_k_one_are_greedy() -> None:
    greedy = sample(SamplingParams(max_tokens=8, temperature=0.0, topk_logprobs=1))
    assert len({tuple(s.tokens) for s in greedy.sequences}) == 1
    sequence = greedy.sequences[0]
    assert sequence.maybe_topk is not None
    assert [row[0][0] for row in sequence.maybe_topk] == sequence.tokens  # each token its position's best
    top1 = sample(SamplingParams(max_tokens=8, top_k=1, seed=3))
    assert all(s.tokens == sequence.tokens for s in top1.sequences)


def test_top_k_and_top_p_keep_draws_among_the_likeliest() -> None:
    for params in (
        SamplingParams(max_tokens=8, top_k=3, seed=1, topk_logprobs=3),
        SamplingParams(max_tokens=8, top_p=1e-6, seed=1, topk_logprobs=3),
    ):
        for sequence in sample(params).sequences:
            assert sequence.maybe_topk is not None and len(sequence.maybe_topk) == len(sequence.tokens)
            allowed = 3 if params.top_k == 3 else 1
            assert all(
                token in [t for t, _ in row[:allowed]]
                for token, row in zip(sequence.tokens, sequence.maybe_topk, strict=True)
            )
    free = sample(SamplingParams(max_tokens=8, seed=1, topk_logprobs=3))
    assert any(
        token not in [t for t, _ in row]
        for s in free.sequences
        for token, row in zip(s.tokens, s.maybe_topk or [], strict=True)
    )  # at the default settings the draws are not limited to the top 3


def test_prompt_detail_agrees_with_compute_logprobs() -> None:
    async def main() -> tuple[list[float | None], PromptScores, PromptScores]:
        sampler = await NoopBackend().create_sampling_client(base_model=BASE_MODEL)
        detail = PromptDetail(topk=2, targets=[[17, -1], [99, 5], [230, 6]], alt_k=3, temperature=1.0, seed=4)
        return (
            await sampler.compute_logprobs(PROMPT),
            await sampler.score_prompt(PROMPT, detail),
            await sampler.score_prompt(PROMPT, detail),
        )

    logprobs, scores, again = asyncio.run(main())
    assert scores == again  # seeded alternatives
    assert scores.logprobs == logprobs
    assert scores.topk is not None
    assert scores.targets is not None and [row[0] for row in scores.targets] == logprobs[1:]
    assert scores.targets[0][1] is None
    assert scores.topk is not None and all(row[0][1] >= row[1][1] for row in scores.topk)
    assert scores.alt_tokens is not None and [len(row) for row in scores.alt_tokens] == [3, 3, 3]
    assert top_tokens(0, [1, 2, 3], 2) == sorted(top_tokens(0, [1, 2, 3], 3), key=lambda p: -p[1])[:2]
