"""Small builders shared by the contract tests: data in the shape every backend takes."""

from __future__ import annotations

from collections.abc import Sequence

from kitchen.engine.ports import SamplingClient, ServiceBackend, TrainingClient
from train_core.types import AdamParams, Datum, ModelInput, TensorData

BASE_MODEL = "tiny"
LOGPROB_ATOL = 1e-4
"""How closely two logprob paths (forward, compute_logprobs, sampling) must agree on one weights
version: float32 kernels may differ in the last bits between batch layouts, never by more."""
TRAIN_LR = 1e-2
"""Large enough that one AdamW step visibly moves a real model's logprobs."""

TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "12 + 30 = 42, and 7 * 6 = 42 too.",
    "Post-training turns a base model into an assistant.",
)


def sft_datum(tokens: Sequence[int]) -> Datum:
    """A cross-entropy datum over a whole token sequence (inputs shifted against targets)."""
    return Datum(
        ModelInput.from_ints(tokens[:-1]),
        {
            "target_tokens": TensorData.from_list(tokens[1:], "int64"),
            "weights": TensorData.from_list([1.0] * (len(tokens) - 1), "float32"),
        },
    )


def encode_texts(backend: ServiceBackend) -> list[list[int]]:
    tokenizer = backend.get_tokenizer(BASE_MODEL)
    return [tokenizer.encode(text, add_special_tokens=False) for text in TEXTS]


def sft_batch(backend: ServiceBackend) -> list[Datum]:
    return [sft_datum(tokens) for tokens in encode_texts(backend)]


async def forward_logprobs(client: TrainingClient, data: Sequence[Datum]) -> list[list[float]]:
    """Each datum's target logprobs from a forward pass (no gradient step)."""
    output = await (await client.forward(data, "cross_entropy"))
    return [[float(v) for v in out["logprobs"].data] for out in output.loss_fn_outputs]


async def scored_logprobs(sampler: SamplingClient, tokens_D: Sequence[Sequence[int]]) -> list[list[float]]:
    """compute_logprobs of each sequence, without its leading None: aligned with forward's targets."""
    scored_D = [await sampler.compute_logprobs(ModelInput.from_ints(tokens)) for tokens in tokens_D]
    return [[float(v) for v in scored[1:] if v is not None] for scored in scored_D]


async def train_step(client: TrainingClient, data: Sequence[Datum]) -> None:
    """One cross-entropy forward_backward and AdamW step, awaited."""
    await (await client.forward_backward(data, "cross_entropy"))
    await (await client.optim_step(AdamParams(learning_rate=TRAIN_LR)))


def max_abs_diff(a_D: Sequence[Sequence[float]], b_D: Sequence[Sequence[float]]) -> float:
    """Largest elementwise gap between two per-datum logprob lists of equal shapes."""
    assert [len(a) for a in a_D] == [len(b) for b in b_D]
    return max(abs(x - y) for a, b in zip(a_D, b_D, strict=True) for x, y in zip(a, b, strict=True))


class ScriptedFeed:
    """A weight feed that publishes `later` from its `switch_after + 1`-th look on: the trainer's
    publication at a known point of a decode (a stand-in for timing, which a test cannot steer)."""

    def __init__(self, first: tuple[int, SamplingClient], later: tuple[int, SamplingClient], switch_after: int) -> None:
        self.first, self.later, self.switch_after = first, later, switch_after
        self.looks = 0

    def latest(self) -> tuple[int, SamplingClient]:
        self.looks += 1
        return self.later if self.looks > self.switch_after else self.first
