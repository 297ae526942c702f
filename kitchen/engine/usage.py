"""Token usage of a run, counted at the ports: tokens sent to be read (sampling prompts, scored
sequences, forward-only passes), tokens sampled, and tokens trained on (forward-backward passes).
Each step's row gets `usage/prompt_tokens`, `usage/sampled_tokens` and `usage/trained_tokens`,
and, where the backend has a price table (Tinker: `tinker.prices`), `usage/cost_usd`, the
estimated cost of the step. Paid services bill these three kinds at different rates, so they are
counted apart; `kitchen report` sums them over the run."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from kitchen.engine.ports import FollowsWeightUpdates, SamplingClient, ServiceBackend, TrainingClient, WeightFeed
from train_core.types import Datum, ModelInput, SampleResult

USAGE_KEYS = ("usage/prompt_tokens", "usage/sampled_tokens", "usage/trained_tokens")
COST_KEY = "usage/cost_usd"


class TokenPrices(BaseModel):
    """A user-supplied price table: US dollars per million tokens of each kind."""

    model_config = ConfigDict(extra="forbid")

    prompt: float = Field(ge=0, description="USD per million prompt (prefill) tokens")
    sampled: float = Field(ge=0, description="USD per million sampled tokens")
    trained: float = Field(ge=0, description="USD per million trained tokens")


@runtime_checkable
class PricedBackend(Protocol):
    """A backend that knows what its tokens cost (None: no table given)."""

    token_prices: TokenPrices | None


@dataclass
class TokenUsage:
    prompt: int = 0
    sampled: int = 0
    trained: int = 0

    def cost_usd(self, prices: TokenPrices) -> float:
        return (self.prompt * prices.prompt + self.sampled * prices.sampled + self.trained * prices.trained) / 1e6


class UsageMeter:
    """Counts what the wrapped clients are asked for; `take_step` hands over the counts since
    the last call (what the current step used) as metrics."""

    def __init__(self, prices: TokenPrices | None = None) -> None:
        self.prices = prices
        self.step = TokenUsage()
        self.total = TokenUsage()

    def count(self, prompt: int = 0, sampled: int = 0, trained: int = 0) -> None:
        for usage in (self.step, self.total):
            usage.prompt += prompt
            usage.sampled += sampled
            usage.trained += trained

    def take_step(self) -> dict[str, float]:
        step, self.step = self.step, TokenUsage()
        return _metrics(step, self.prices)

    def totals(self) -> dict[str, float]:
        """The whole run's counts (this process's), under the step metrics' names without `usage/`."""
        return {key.removeprefix("usage/"): value for key, value in _metrics(self.total, self.prices).items()}

    def wrap(self, backend: ServiceBackend) -> ServiceBackend:
        """The backend with every client it makes metered (its optional calls kept)."""
        return cast(ServiceBackend, _MeteredBackend(backend, self))


def _metrics(usage: TokenUsage, prices: TokenPrices | None) -> dict[str, float]:
    counts = (float(usage.prompt), float(usage.sampled), float(usage.trained))
    metrics = dict(zip(USAGE_KEYS, counts, strict=True))
    if prices is not None:
        metrics[COST_KEY] = usage.cost_usd(prices)
    return metrics


def _input_tokens(data: Sequence[Datum]) -> int:
    return sum(datum.model_input.length for datum in data)


def _sampled_tokens(result: SampleResult) -> int:
    return sum(len(sequence.tokens) for sequence in result.sequences)


class _Proxy:
    """Forwards everything it does not meter, so a backend's optional protocols stay visible."""

    def __init__(self, inner: Any, meter: UsageMeter) -> None:
        self._inner, self._meter = inner, meter

    def __getattr__(self, name: str) -> Any:
        if name in ("_inner", "_meter"):  # not yet set (a copy being made)
            raise AttributeError(name)
        return getattr(self._inner, name)


class _MeteredSamplingClient(_Proxy):
    def __getattr__(self, name: str) -> Any:
        attribute = super().__getattr__(name)
        if name != "sample_mixture":  # the optional geometric mixture (SamplesGeometricMixture)
            return attribute

        async def sample_mixture(
            prompt: ModelInput, num_samples: int, sampling_params: Any, reference: SamplingClient, coef: float
        ) -> SampleResult:
            # the backend mixes with a client it made, not its metered proxy
            inner = reference._inner if isinstance(reference, _MeteredSamplingClient) else reference
            result = await attribute(prompt, num_samples, sampling_params, inner, coef)
            self._meter.count(prompt=prompt.length, sampled=_sampled_tokens(result))
            return cast(SampleResult, result)

        return sample_mixture

    async def sample(self, prompt: ModelInput, num_samples: int, *args: Any, **kwargs: Any) -> SampleResult:
        result = await self._inner.sample(prompt, num_samples, *args, **kwargs)
        self._meter.count(prompt=prompt.length, sampled=_sampled_tokens(result))
        return cast(SampleResult, result)

    async def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        self._meter.count(prompt=prompt.length)
        return cast("list[float | None]", await self._inner.compute_logprobs(prompt))


class _MeteredFollowingClient(_MeteredSamplingClient):
    """A metered client of a backend that follows weight updates within a generation (declared
    on the class: samplers check the class once)."""

    async def sample_following(
        self, prompt: ModelInput, num_samples: int, sampling_params: Any, feed: WeightFeed, version: int
    ) -> SampleResult:
        result = await self._inner.sample_following(prompt, num_samples, sampling_params, _BackendFeed(feed), version)
        self._meter.count(prompt=prompt.length, sampled=_sampled_tokens(result))
        return cast(SampleResult, result)


class _BackendFeed:
    """A weight feed that hands the backend its own clients: a backend switches a generation to
    newer weights only on a client it made."""

    def __init__(self, feed: WeightFeed) -> None:
        self._feed = feed

    def latest(self) -> tuple[int, SamplingClient]:
        version, client = self._feed.latest()
        return version, client._inner if isinstance(client, _MeteredSamplingClient) else client


def _metered_sampler(client: SamplingClient, meter: UsageMeter) -> SamplingClient:
    metered = _MeteredFollowingClient if isinstance(client, FollowsWeightUpdates) else _MeteredSamplingClient
    return cast(SamplingClient, metered(client, meter))


class _MeteredTrainingClient(_Proxy):
    async def forward(self, data: Sequence[Datum], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        self._meter.count(prompt=_input_tokens(data))
        return cast(Awaitable[Any], await self._inner.forward(data, *args, **kwargs))

    async def forward_backward(self, data: Sequence[Datum], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        self._meter.count(trained=_input_tokens(data))
        return cast(Awaitable[Any], await self._inner.forward_backward(data, *args, **kwargs))

    async def forward_backward_custom(self, data: Sequence[Datum], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        self._meter.count(trained=_input_tokens(data))
        return cast(Awaitable[Any], await self._inner.forward_backward_custom(data, *args, **kwargs))

    async def save_weights_and_get_sampling_client(self, name: str | None = None) -> SamplingClient:
        return _metered_sampler(await self._inner.save_weights_and_get_sampling_client(name), self._meter)


def _metered_trainer(client: TrainingClient, meter: UsageMeter) -> TrainingClient:
    return cast(TrainingClient, _MeteredTrainingClient(client, meter))


class _MeteredBackend(_Proxy):
    async def create_training_client(self, *args: Any, **kwargs: Any) -> TrainingClient:
        return _metered_trainer(await self._inner.create_training_client(*args, **kwargs), self._meter)

    async def create_training_client_from_state(self, *args: Any, **kwargs: Any) -> TrainingClient:
        return _metered_trainer(await self._inner.create_training_client_from_state(*args, **kwargs), self._meter)

    async def create_sampling_client(self, *args: Any, **kwargs: Any) -> SamplingClient:
        return _metered_sampler(await self._inner.create_sampling_client(*args, **kwargs), self._meter)

    def __getattr__(self, name: str) -> Any:
        attribute = super().__getattr__(name)
        if name != "create_lora_training_client":  # the optional LoRA-layer choice
            return attribute

        async def create(*args: Any, **kwargs: Any) -> TrainingClient:
            return _metered_trainer(await attribute(*args, **kwargs), self._meter)

        return create


def backend_prices(backend: ServiceBackend) -> TokenPrices | None:
    return backend.token_prices if isinstance(backend, PricedBackend) else None
