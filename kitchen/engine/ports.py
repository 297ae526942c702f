"""Backend ports, modelled on the Tinker SDK so that the tinker adapter is thin.

Training-client methods *submit* a request and return an awaitable future; awaiting it gives
the result. Requests run in submission order, which is what makes pipelining safe: a caller may
submit step i+1 before awaiting step i.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from train_core.types import (
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    LoraLayers,
    ModelInput,
    OptimStepOutput,
    PromptDetail,
    PromptScores,
    SampleResult,
    SamplingParams,
)

if TYPE_CHECKING:
    import torch

# A custom loss sees the data and, per datum, the policy's logprobs of its target tokens (with
# gradients); it returns a scalar loss and metrics. DPO is built on this.
CustomLossFn = Callable[[Sequence[Datum], list["torch.Tensor"]], tuple["torch.Tensor", dict[str, float]]]


class Tokenizer(Protocol):
    """The subset of a Hugging Face tokenizer that kitchen relies on."""

    eos_token_id: int | None

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...

    def convert_tokens_to_ids(self, tokens: Any) -> Any: ...


@runtime_checkable
class SamplingClient(Protocol):
    async def sample(self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams) -> SampleResult: ...

    async def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        """Logprob of each prompt token given the ones before it; the first is None."""
        ...


@runtime_checkable
class ScoresPromptDetail(Protocol):
    """A sampling client that reports more of a prompt than `compute_logprobs`: at each position
    after the first, the most likely tokens, the logprobs of chosen tokens, and tokens drawn from
    the model's distribution (`PromptDetail`). Optional: what the Tinker API's top-k, target and
    alternative-token prompt logprobs need (kitchen serve refuses them on backends without it)."""

    async def score_prompt(self, prompt: ModelInput, detail: PromptDetail) -> PromptScores: ...


@runtime_checkable
class SamplesGeometricMixture(Protocol):
    """A sampling client that samples from the geometric mixture of its model and another client's
    (a reference model): each token is drawn from `softmax(c * reference_logits + (1 - c) * logits)`
    (the temperature applied after mixing), i.e. proportional to `pi^(1-c) * pi_ref^c`, and its
    logprob is reported under that mixture. Optional: what Nash-MD's second completion needs
    (the local backend's clients, on local clients of the same vocabulary; noop's)."""

    async def sample_mixture(
        self,
        prompt: ModelInput,
        num_samples: int,
        sampling_params: SamplingParams,
        reference: SamplingClient,
        mixture_coef: float,
    ) -> SampleResult: ...


class WeightFeed(Protocol):
    """The newest published policy: its version and a sampling client on its weights. Read
    between decode steps by a sampler that follows weight updates (possibly from its own
    thread: `latest` must return a consistent pair without awaiting)."""

    def latest(self) -> tuple[int, SamplingClient]: ...


@runtime_checkable
class FollowsWeightUpdates(Protocol):
    """A sampling client whose generations can switch to newer weights between decode steps
    (in-flight weight updates). `version` is this client's own in the feed's numbering; each
    returned token carries the version that produced it (`TokensWithLogprobs.maybe_versions`)
    and its logprob under those weights. Optional: backends without it are followed between
    requests only."""

    async def sample_following(
        self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams, feed: WeightFeed, version: int
    ) -> SampleResult: ...


@runtime_checkable
class TrainingClient(Protocol):
    async def forward(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None = None
    ) -> Awaitable[ForwardBackwardOutput]: ...

    async def forward_backward(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None = None
    ) -> Awaitable[ForwardBackwardOutput]: ...

    async def forward_backward_custom(
        self, data: Sequence[Datum], loss_fn: CustomLossFn
    ) -> Awaitable[ForwardBackwardOutput]: ...

    async def optim_step(self, adam_params: AdamParams) -> Awaitable[OptimStepOutput]: ...

    async def save_state(self, name: str) -> Awaitable[str]:
        """Save weights and optimizer state; the future gives a path for `load_state`."""
        ...

    async def load_state(self, path: str, with_optimizer: bool = True) -> Awaitable[None]: ...

    async def save_weights_for_sampler(self, name: str) -> Awaitable[str]:
        """Save sampler weights; the future gives a path for `create_sampling_client`."""
        ...

    async def save_weights_and_get_sampling_client(self, name: str | None = None) -> SamplingClient: ...

    def get_tokenizer(self) -> Tokenizer: ...


@runtime_checkable
class ServiceBackend(Protocol):
    name: str

    async def create_training_client(
        self, base_model: str, lora_rank: int | None = None, seed: int = 0
    ) -> TrainingClient: ...

    async def create_training_client_from_state(self, path: str, with_optimizer: bool = True) -> TrainingClient: ...

    async def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> SamplingClient: ...

    def get_tokenizer(self, base_model: str) -> Tokenizer: ...

    async def close(self) -> None: ...


@runtime_checkable
class SelectsLoraLayers(Protocol):
    """A backend whose LoRA clients can put adapters on a chosen set of layers (`LoraLayers`:
    attention, MLP, output head) instead of its default. Optional: the Tinker API's
    `train_attn` / `train_mlp` / `train_unembed` need it (kitchen serve refuses a choice other
    than the default on backends without it)."""

    async def create_lora_training_client(
        self, base_model: str, lora_rank: int, seed: int, layers: LoraLayers
    ) -> TrainingClient: ...


@runtime_checkable
class MixesSamplerWeights(Protocol):
    """A training client that can save, for the sampler, a mix of its current weights and saved
    sampler weights: `alpha * current + (1 - alpha) * saved`, parameter by parameter (TR-DPO's
    soft reference update). Optional: a hard update (alpha 1) needs only `save_weights_for_sampler`."""

    async def save_mixed_weights_for_sampler(self, name: str, other_path: str, alpha: float) -> Awaitable[str]: ...


def _protocol_methods(protocol: type) -> list[str]:
    return [name for name in vars(protocol) if not name.startswith("_") and callable(getattr(protocol, name))]


OPTIONAL_PORTS: dict[type, type] = {
    ScoresPromptDetail: SamplingClient,
    FollowsWeightUpdates: SamplingClient,
    SamplesGeometricMixture: SamplingClient,
    MixesSamplerWeights: TrainingClient,
    SelectsLoraLayers: ServiceBackend,
}
"""Each optional capability and the port whose clients may have it: a call to it is that port's."""

_CALL_NAMES: dict[str, str] = {
    f"{protocol.__name__}.{method}": f"{OPTIONAL_PORTS.get(protocol, protocol).__name__}.{method}"
    for protocol in (ServiceBackend, TrainingClient, SamplingClient, *OPTIONAL_PORTS)
    for method in _protocol_methods(protocol)
}

PORT_CALLS: frozenset[str] = frozenset(
    f"{protocol.__name__}.{method}"
    for protocol in (ServiceBackend, TrainingClient, SamplingClient)
    for method in _protocol_methods(protocol)
)
"""Every call of the three ports (a backend runs these; the optional capabilities' are beside them)."""


OPTIONAL_CALLS: frozenset[str] = frozenset(_CALL_NAMES.values()) - PORT_CALLS
"""The optional capabilities' calls, named by their port (a backend's spec may list them)."""


def port_call_name(qualname: str) -> str | None:
    """`<Port>.<method>` of a port method's qualified name (an optional capability's method is
    named by its port: `ScoresPromptDetail.score_prompt` is `SamplingClient.score_prompt`)."""
    return _CALL_NAMES.get(qualname)


PORT_TYPES: dict[type, str] = {ServiceBackend: "service"}
"""The ports a run binds, by the protocol a stage's `run` parameter is annotated with."""
