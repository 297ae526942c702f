"""The local backend's geometric-mixture sampler (`SamplesGeometricMixture`, Nash-MD's second
completion) on the tiny model: at c = 0 it samples the policy's distribution, at c = 1 the
reference's, and in between `log_softmax(c * ref_logits + (1 - c) * logits)`, each checked
against the models' own logprobs of the sampled tokens."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import torch

from adapters.local import LocalBackend
from adapters.local.sampling_client import LocalSamplingClient
from kitchen.engine.errors import DataError
from kitchen.engine.ports import SamplesGeometricMixture, SamplingClient
from train_core.supervised import datum_from_tokens_weights
from train_core.types import AdamParams, ModelInput, SampleResult, SamplingParams

PROMPT = [5, 17, 99, 230, 41, 8]
PARAMS = SamplingParams(max_tokens=12, temperature=1.0, seed=3)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBackend]:
    service = LocalBackend(checkpoint_dir=tmp_path_factory.mktemp("mixture"), device="cpu")
    yield service
    asyncio.run(service.close())


@pytest.fixture(scope="module")
def clients(backend: LocalBackend) -> tuple[LocalSamplingClient, LocalSamplingClient]:
    """(policy, reference): the policy is the tiny model after two large steps on one sequence,
    so the two distributions differ clearly."""

    async def main() -> tuple[SamplingClient, SamplingClient]:
        trainer = await backend.create_training_client("tiny", seed=0)
        tokens = [*PROMPT, 300, 301, 302, 303, 304, 305]
        datum = datum_from_tokens_weights(tokens, [1.0] * len(tokens))
        for _ in range(2):
            await (await trainer.forward_backward([datum], "cross_entropy"))
            await (await trainer.optim_step(AdamParams(learning_rate=1e-2)))
        return await trainer.save_weights_and_get_sampling_client(), await backend.create_sampling_client(
            base_model="tiny"
        )

    policy, reference = asyncio.run(main())
    assert isinstance(policy, LocalSamplingClient) and isinstance(reference, LocalSamplingClient)
    return policy, reference


def _mixture(policy: LocalSamplingClient, reference: LocalSamplingClient, c: float, samples: int = 3) -> SampleResult:
    assert isinstance(policy, SamplesGeometricMixture)
    return asyncio.run(policy.sample_mixture(ModelInput.from_ints(PROMPT), samples, PARAMS, reference, c))


def _model_logprobs(client: LocalSamplingClient, tokens: list[int]) -> list[float]:
    logprobs = asyncio.run(client.compute_logprobs(ModelInput.from_ints([*PROMPT, *tokens])))
    return [float(lp) for lp in logprobs[len(PROMPT) :] if lp is not None]


@pytest.mark.parametrize("c", [0.0, 1.0])
def test_the_ends_of_the_mixture_are_the_two_models(
    clients: tuple[LocalSamplingClient, LocalSamplingClient], c: float
) -> None:
    """c = 0 reports the policy's own logprobs and draws what `sample` draws with the same seed;
    c = 1 the reference's."""
    policy, reference = clients
    pure = policy if c == 0.0 else reference
    other = reference if c == 0.0 else policy
    mixed = _mixture(policy, reference, c)
    sampled = asyncio.run(pure.sample(ModelInput.from_ints(PROMPT), 3, PARAMS))
    assert [s.tokens for s in mixed.sequences] == [s.tokens for s in sampled.sequences]
    differs = 0.0
    for sequence in mixed.sequences:
        assert sequence.maybe_logprobs == pytest.approx(_model_logprobs(pure, sequence.tokens), abs=1e-4)
        other_logprobs = _model_logprobs(other, sequence.tokens)
        differs = max(differs, max(abs(a - b) for a, b in zip(sequence.logprobs, other_logprobs, strict=True)))
    assert differs > 1e-2  # the two models differ: the check above could have failed


def test_the_middle_of_the_mixture_is_the_geometric_mixture(
    clients: tuple[LocalSamplingClient, LocalSamplingClient],
) -> None:
    """At c = 0.3 each reported logprob is `log_softmax(0.3 * ref_logits + 0.7 * logits)` of the
    sampled token, the logits from one full forward of each model over prompt and completion."""
    policy, reference = clients
    c = 0.3
    for sequence in _mixture(policy, reference, c).sequences:
        tokens = torch.tensor([[*PROMPT, *sequence.tokens]])
        with torch.inference_mode():
            logits = policy.lease.model(input_ids=tokens).logits[0].double()
            ref_logits = reference.lease.model(input_ids=tokens).logits[0].double()
        mixed = torch.log_softmax(c * ref_logits + (1 - c) * logits, dim=-1)
        positions = range(len(PROMPT) - 1, tokens.shape[1] - 1)
        want = [float(mixed[p, tokens[0, p + 1]]) for p in positions]
        assert sequence.maybe_logprobs == pytest.approx(want, abs=1e-4)
        assert sequence.maybe_logprobs != pytest.approx(_model_logprobs(policy, sequence.tokens), abs=1e-3)


def test_a_seed_draws_the_same_mixture_samples(clients: tuple[LocalSamplingClient, LocalSamplingClient]) -> None:
    policy, reference = clients
    first, again = _mixture(policy, reference, 0.5, 2), _mixture(policy, reference, 0.5, 2)
    assert [s.tokens for s in first.sequences] == [s.tokens for s in again.sequences]
    assert first.sequences[0].tokens != first.sequences[1].tokens  # rows draw their own numbers


def test_bad_mixtures_are_refused(clients: tuple[LocalSamplingClient, LocalSamplingClient]) -> None:
    policy, reference = clients
    with pytest.raises(DataError, match=r"lies in \[0, 1\]"):
        _mixture(policy, reference, 1.5)

    class Remote:
        async def sample(self, prompt: ModelInput, num_samples: int, params: SamplingParams) -> SampleResult:
            raise AssertionError("not called")

    with pytest.raises(DataError, match="mixes two local models"):
        asyncio.run(policy.sample_mixture(ModelInput.from_ints(PROMPT), 1, PARAMS, Remote(), 0.5))  # type: ignore[arg-type]
