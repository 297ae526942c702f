"""Fixtures for the local backend tests: a backend on the tiny model and small fixed batches."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest
from transformers import AutoTokenizer

from adapters.common.tiny import TINY_DIR
from adapters.local import LocalBackend
from kitchen.engine.ports import Tokenizer
from train_core.types import Datum, ModelInput, TensorData

TEXTS = (
    "Alice reads a red book.",
    "What is 23 + 45? The answer is 68.",
    "The quick dog finds the old garden and the river.",
    '<tool_call>\n{"name": "search", "arguments": {"limit": 3}}\n</tool_call>',
)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    """A CPU backend writing checkpoints under tmp_path, closed after the test."""
    service = LocalBackend(checkpoint_dir=tmp_path, device="cpu")
    yield service
    asyncio.run(service.close())


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return cast(Tokenizer, AutoTokenizer.from_pretrained(TINY_DIR))


MakeDatum = Callable[..., Datum]


def shifted(tokens: list[int], **per_token: list[float]) -> Datum:
    """A datum predicting tokens[1:] from tokens[:-1]; extra float inputs are aligned with targets."""
    inputs = {"target_tokens": TensorData.from_list(tokens[1:], "int64")}
    inputs.update({key: TensorData.from_list(values, "float32") for key, values in per_token.items()})
    return Datum(ModelInput.from_ints(tokens[:-1]), inputs)


@pytest.fixture(scope="session")
def make_datum() -> MakeDatum:
    """`make_datum(tokens, weights=[...])`: see `shifted`."""
    return shifted


@pytest.fixture(scope="session")
def token_lists(tokenizer: Tokenizer) -> list[list[int]]:
    """The fixed texts as token lists, of different lengths (so batches need padding)."""
    return [tokenizer.encode(text, add_special_tokens=False) for text in TEXTS]


@pytest.fixture(scope="session")
def sl_batch(token_lists: list[list[int]]) -> list[Datum]:
    """Cross-entropy datums with weight 1 on every target but the first."""
    return [shifted(tokens, weights=[0.0] + [1.0] * (len(tokens) - 2)) for tokens in token_lists]


@pytest.fixture(scope="session")
def rl_batch(token_lists: list[list[int]]) -> list[Datum]:
    """Policy-gradient datums with made-up sampling (and proximal) logprobs and alternating-sign
    advantages."""
    data = []
    for index, tokens in enumerate(token_lists):
        n = len(tokens) - 1
        sign = 1.0 if index % 2 == 0 else -1.0
        # The last half of the targets play the action tokens of gspo's sequence ratio.
        mask = [float(i >= n // 2) for i in range(n)]
        data.append(
            shifted(
                tokens,
                logprobs=[-7.0 + 0.1 * i for i in range(n)],
                proximal_logprobs=[-7.2 + 0.1 * i for i in range(n)],
                advantages=[sign] * n,
                sequence_ratio_mask=mask,
            )
        )
    return data
