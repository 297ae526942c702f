"""Core data types shared by every layer, shaped like the Tinker service's so adapters stay thin."""

from __future__ import annotations

import array
import itertools
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Literal, TypeGuard

if TYPE_CHECKING:
    import torch

StopCondition = list[str] | list[int]
StopReason = Literal["stop", "length"]
TensorDtype = Literal["int64", "float32"]

# torch is imported only where a tensor is made, so the config / CLI path (`kitchen validate`)
# that only needs these types does not load it.


def _torch_dtype(dtype: TensorDtype) -> torch.dtype:
    import torch

    return torch.int64 if dtype == "int64" else torch.float32


_ARRAY_CODES: dict[TensorDtype, str] = {"int64": "q", "float32": "f"}


def numbers_tensor(values: Callable[[], Iterable[float] | Iterable[int]], dtype: TensorDtype) -> torch.Tensor:
    """A flat `dtype` tensor of the Python numbers `values()` yields, packed into one C array on
    the way (a third faster than `torch.tensor` on a list, for the per-step batches of short
    sequences); numbers the array will not take (a float for int64) go through `torch.tensor`."""
    import torch

    try:
        packed = array.array(_ARRAY_CODES[dtype], values())
    except TypeError:
        return torch.tensor(list(values()), dtype=_torch_dtype(dtype))
    if not packed:
        return torch.empty(0, dtype=_torch_dtype(dtype))
    return torch.frombuffer(packed, dtype=_torch_dtype(dtype))  # the tensor keeps the array alive


def _is_tensor(data: object) -> TypeGuard[torch.Tensor]:
    torch = sys.modules.get("torch")  # no tensor can exist before torch is imported
    return torch is not None and isinstance(data, torch.Tensor)


@dataclass(frozen=True)
class EncodedTextChunk:
    """A run of token ids."""

    tokens: tuple[int, ...]

    @property
    def length(self) -> int:
        return len(self.tokens)


ImageFormat = Literal["png", "jpeg"]


@dataclass(frozen=True)
class ImageChunk:
    """An image in the model input, as the Tinker service takes it: the encoded image and the
    number of positions it fills (the model's image placeholder tokens, which the backend turns
    into the vision encoder's outputs). `expected_tokens` comes from the renderer, which knows the
    model's image processor; a backend that computes another count refuses the input."""

    data: bytes = field(repr=False)
    format: ImageFormat
    expected_tokens: int

    def __post_init__(self) -> None:
        if self.expected_tokens < 1:
            raise ValueError(f"an image fills at least one position, got expected_tokens={self.expected_tokens}")

    @property
    def length(self) -> int:
        return self.expected_tokens


ModelInputChunk = EncodedTextChunk | ImageChunk


@dataclass(frozen=True)
class ModelInput:
    """The tokens fed to a model, as a sequence of chunks (token runs and images)."""

    chunks: tuple[ModelInputChunk, ...] = ()

    @classmethod
    def from_ints(cls, tokens: Sequence[int]) -> ModelInput:
        return cls((EncodedTextChunk(tuple(map(int, tokens))),)) if tokens else cls()

    @classmethod
    def empty(cls) -> ModelInput:
        return cls()

    def to_ints(self) -> list[int]:
        """The token ids; an input holding images has no ids for them: see `token_ids`."""
        if len(self.chunks) == 1 and isinstance(self.chunks[0], EncodedTextChunk):  # the common case
            return list(self.chunks[0].tokens)
        if self.images:
            raise ValueError(
                f"this model input holds {len(self.images)} image chunk(s), which have no token ids: "
                "only a vision-language backend can take it"
            )
        return [t for chunk in self.chunks if isinstance(chunk, EncodedTextChunk) for t in chunk.tokens]

    def token_ids(self, image_token_id: int) -> list[int]:
        """The token ids with each image's positions filled with `image_token_id` (the model's
        image placeholder token)."""
        ids: list[int] = []
        for chunk in self.chunks:
            ids += chunk.tokens if isinstance(chunk, EncodedTextChunk) else [image_token_id] * chunk.length
        return ids

    @property
    def images(self) -> tuple[ImageChunk, ...]:
        return tuple(chunk for chunk in self.chunks if isinstance(chunk, ImageChunk))

    @property
    def length(self) -> int:
        return sum(chunk.length for chunk in self.chunks)

    def append(self, chunk: ModelInputChunk) -> ModelInput:
        return ModelInput((*self.chunks, chunk))

    def append_int(self, token: int) -> ModelInput:
        return self.append(EncodedTextChunk((int(token),)))


class TensorData:
    """A flat list of numbers with a dtype and shape: what crosses a port boundary.

    It holds whichever form it was made from, a torch tensor (`from_torch`) or Python numbers
    (`from_list`, the constructor), and makes the other only when asked (`.data`, `to_torch()`),
    once: a tensor handed from a backend to a stage crosses the port without a round trip through
    Python numbers. Treat it as immutable: do not modify the tensor `to_torch()` returns in place.
    """

    __slots__ = ("_data", "_tensor", "dtype", "shape")

    dtype: TensorDtype
    shape: tuple[int, ...]

    def __init__(
        self, data: Sequence[float] | Sequence[int] | torch.Tensor, dtype: TensorDtype, shape: Sequence[int]
    ) -> None:
        self.dtype = dtype
        self.shape = tuple(map(int, shape))
        if _is_tensor(data):
            self._tensor: torch.Tensor | None = data.detach().to("cpu", _torch_dtype(dtype)).reshape(self.shape)
            self._data: tuple[float, ...] | tuple[int, ...] | None = None
        else:
            self._tensor = None
            self._data = tuple(data)

    @classmethod
    def from_torch(cls, tensor: torch.Tensor) -> TensorData:
        """Keeps (a cpu copy of) the tensor itself: no conversion to Python numbers."""
        dtype: TensorDtype = "float32" if tensor.is_floating_point() else "int64"
        # one copy, never sharing the caller's storage
        return cls._made(None, tensor.detach().to("cpu", _torch_dtype(dtype), copy=True), dtype, tuple(tensor.shape))

    @classmethod
    def from_list(cls, values: Sequence[float] | Sequence[int], dtype: TensorDtype) -> TensorData:
        numbers = tuple(map(int if dtype == "int64" else float, values))
        return cls._made(numbers, None, dtype, (len(numbers),))

    @classmethod
    def _made(
        cls,
        data: tuple[float, ...] | tuple[int, ...] | None,
        tensor: torch.Tensor | None,
        dtype: TensorDtype,
        shape: tuple[int, ...],
    ) -> TensorData:
        """One already in its final form, past `__init__`'s conversions (RL assembly makes several
        per datum, so the constructors that know their input's form skip them)."""
        made = cls.__new__(cls)
        made._data, made._tensor, made.dtype, made.shape = data, tensor, dtype, shape
        return made

    @property
    def data(self) -> tuple[float, ...] | tuple[int, ...]:
        """The numbers, flat, as a tuple of Python ints or floats."""
        if self._data is None:
            assert self._tensor is not None
            self._data = tuple(self._tensor.reshape(-1).tolist())
        return self._data

    def to_torch(self) -> torch.Tensor:
        if self._tensor is None:
            import torch

            self._tensor = torch.tensor(self.data, dtype=_torch_dtype(self.dtype)).reshape(self.shape)
        return self._tensor

    def tolist(self) -> list[float] | list[int]:
        return list(self.data)

    @staticmethod
    def concat(items: Sequence[TensorData], dtype: TensorDtype) -> torch.Tensor:
        """All of `items`' numbers, flat and in order, as one `dtype` tensor: their tensors
        concatenated when each holds one, else one conversion of all their numbers (a tensor per
        item would cost more than the numbers themselves on short sequences)."""
        import torch

        if all(item._tensor is not None for item in items):
            return torch.cat([item.to_torch().reshape(-1) for item in items]).to(_torch_dtype(dtype))
        return numbers_tensor(lambda: itertools.chain.from_iterable(item.data for item in items), dtype)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorData):
            return NotImplemented
        return (self.dtype, self.shape, self.data) == (other.dtype, other.shape, other.data)

    def __hash__(self) -> int:
        return hash((self.dtype, self.shape, self.data))

    def __repr__(self) -> str:
        return f"TensorData(data={self.data!r}, dtype={self.dtype!r}, shape={self.shape!r})"

    def __getstate__(self) -> tuple[tuple[float, ...] | tuple[int, ...], TensorDtype, tuple[int, ...]]:
        return (self.data, self.dtype, self.shape)

    def __setstate__(self, state: tuple[tuple[float, ...] | tuple[int, ...], TensorDtype, tuple[int, ...]]) -> None:
        self._data, self.dtype, self.shape = state
        self._tensor = None


@dataclass(frozen=True)
class Datum:
    """One training example: the model input plus the named tensors its loss function reads."""

    model_input: ModelInput
    loss_fn_inputs: dict[str, TensorData] = field(default_factory=dict)


@dataclass(frozen=True)
class TokensWithLogprobs:
    """A sampled completion: its tokens, their sampling logprobs (when asked for) and why it stopped."""

    tokens: list[int]
    maybe_logprobs: list[float] | None
    stop_reason: StopReason = "stop"
    maybe_versions: list[int] | None = None
    """The policy version that produced each token, where the sampler followed weight updates
    during the generation (`kitchen.families.rl.weight_feed`); None: all of them the sampler's own."""
    maybe_topk: list[list[tuple[int, float]]] | None = None
    """At each sampled position, the `SamplingParams.topk_logprobs` most likely tokens and their
    logprobs (the distribution the token was drawn from), most likely first; None unless asked for."""

    @property
    def logprobs(self) -> list[float]:
        if self.maybe_logprobs is None:
            raise ValueError("these tokens were sampled without logprobs")
        return self.maybe_logprobs


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int | None = None
    seed: int | None = None
    stop: StopCondition | None = None
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    topk_logprobs: int = 0
    """Also return the k most likely tokens and their logprobs at each sampled position
    (`TokensWithLogprobs.maybe_topk`); 0: none."""


@dataclass(frozen=True)
class LoraLayers:
    """Which layers of the model get LoRA adapters: attention projections, MLP (and MoE expert)
    layers, the output head (unembedding). Tinker's `train_attn` / `train_mlp` / `train_unembed`;
    kitchen's default is every linear layer but the output head."""

    attn: bool = True
    mlp: bool = True
    unembed: bool = False


@dataclass(frozen=True)
class PromptDetail:
    """What to report about a prompt beyond its tokens' logprobs, per position after the first:
    the `topk` most likely tokens, the logprobs of chosen `targets` (a [len - 1, K] grid of token
    ids, -1 where nothing is asked), and `alt_k` tokens drawn from the model's distribution at
    `temperature` (seeded by `seed`)."""

    topk: int = 0
    targets: list[list[int]] | None = None
    alt_k: int = 0
    temperature: float = 1.0
    seed: int = 0


@dataclass(frozen=True)
class PromptScores:
    """A prompt scored with a `PromptDetail`: rows are positions 1..len - 1 of the prompt."""

    logprobs: list[float | None]
    """Each prompt token's logprob given those before it (None for the first)."""
    topk: list[list[tuple[int, float]]] | None = None
    targets: list[list[float | None]] | None = None
    """The logprob of each asked target (None where the grid held -1)."""
    alt_tokens: list[list[int]] | None = None
    alt_logprobs: list[list[float]] | None = None


@dataclass(frozen=True)
class AdamParams:
    """AdamW hyperparameters. beta2 defaults to 0.95, as the Tinker service and its recipes use."""

    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0

    @classmethod
    def like(cls, params: object) -> AdamParams:
        """The settings of any object with these attribute names (the tinker SDK's `AdamParams`)."""
        return cls(**{item.name: getattr(params, item.name) for item in fields(cls)})


@dataclass(frozen=True)
class ForwardBackwardOutput:
    """Per-datum loss outputs (at least `logprobs` per target token) and summed metrics."""

    loss_fn_outputs: list[dict[str, TensorData]]
    metrics: dict[str, float]


@dataclass(frozen=True)
class OptimStepOutput:
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SampleResult:
    sequences: list[TokensWithLogprobs]
