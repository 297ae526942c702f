"""The noop sampler's geometric mixture (`SamplesGeometricMixture`, Nash-MD's second completion):
tokens drawn from the mixed pseudo-logprobs of two noop models, each reporting that mix of the two
models' own logprobs (the policy's at c = 0, the reference's at c = 1), seeded, stop rules kept."""

from __future__ import annotations

import asyncio

import pytest

from adapters.noop import NoopBackend
from kitchen.engine.errors import DataError
from kitchen.engine.ports import SamplesGeometricMixture, SamplingClient
from kitchen.testing.contract.data import BASE_MODEL
from train_core.supervised import datum_from_tokens_weights
from train_core.types import AdamParams, ModelInput, SampleResult, SamplingParams

PROMPT = [5, 17, 99, 230]


async def _clients(backend: NoopBackend) -> tuple[SamplingClient, SamplingClient]:
    """(policy after one optimizer step, the base model as reference): different pseudo-weights."""
    trainer = await backend.create_training_client(BASE_MODEL, seed=0)
    await (await trainer.forward_backward([datum_from_tokens_weights([*PROMPT, 7], [1.0] * 5)], "cross_entropy"))
    await (await trainer.optim_step(AdamParams(learning_rate=1e-3)))
    return await trainer.save_weights_and_get_sampling_client(), await backend.create_sampling_client(
        base_model=BASE_MODEL
    )


def _run(c: float, params: SamplingParams) -> tuple[SampleResult, list[list[float]], list[list[float]]]:
    """The mixture's samples and, per sample, the policy's and the reference's logprobs of its tokens."""

    async def main() -> tuple[SampleResult, list[list[float]], list[list[float]]]:
        policy, reference = await _clients(NoopBackend())
        assert isinstance(policy, SamplesGeometricMixture)
        result = await policy.sample_mixture(ModelInput.from_ints(PROMPT), 3, params, reference, c)

        async def own(client: SamplingClient) -> list[list[float]]:
            scored = [
                await client.compute_logprobs(ModelInput.from_ints([*PROMPT, *s.tokens])) for s in result.sequences
            ]
            return [[float(lp) for lp in logprobs[len(PROMPT) :] if lp is not None] for logprobs in scored]

        return result, await own(policy), await own(reference)

    return asyncio.run(main())


@pytest.mark.parametrize("c", [0.0, 0.4, 1.0])
def test_mixture_logprobs_mix_the_two_models(c: float) -> None:
    result, policy, reference = _run(c, SamplingParams(max_tokens=10, seed=2))
    for sequence, lp_policy, lp_reference in zip(result.sequences, policy, reference, strict=True):
        want = [c * r + (1 - c) * p for p, r in zip(lp_policy, lp_reference, strict=True)]
        assert sequence.maybe_logprobs == pytest.approx(want, abs=1e-6)
    assert any(p != pytest.approx(r, abs=1e-3) for p, r in zip(policy, reference, strict=True))


def test_a_seed_draws_the_same_mixture_samples_and_stops_are_kept() -> None:
    params = SamplingParams(max_tokens=60, seed=5, stop=[13])
    first, _, _ = _run(0.5, params)
    again, _, _ = _run(0.5, params)
    assert [s.tokens for s in first.sequences] == [s.tokens for s in again.sequences]
    assert len({tuple(s.tokens) for s in first.sequences}) == 3
    assert all(s.tokens[-1] == 13 for s in first.sequences if s.stop_reason == "stop")
    greedy, _, _ = _run(0.5, SamplingParams(max_tokens=8, temperature=0.0))
    assert len({tuple(s.tokens) for s in greedy.sequences}) == 1


def test_bad_mixtures_are_refused() -> None:
    async def main(c: float, reference_is_noop: bool) -> None:
        policy, reference = await _clients(NoopBackend())
        assert isinstance(policy, SamplesGeometricMixture)
        other: object = reference if reference_is_noop else object()
        await policy.sample_mixture(ModelInput.from_ints(PROMPT), 1, SamplingParams(max_tokens=2), other, c)  # type: ignore[arg-type]

    with pytest.raises(DataError, match=r"lies in \[0, 1\]"):
        asyncio.run(main(-0.1, True))
    with pytest.raises(DataError, match="mixes two noop models"):
        asyncio.run(main(0.5, False))
