from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from train_core.supervised import (
    SequenceTooShortError,
    bits_per_byte,
    datum_from_tokens_weights,
    mean_nll,
    prompt_completion_tokens,
    scored_bytes,
    sequence_nll,
)


def test_shift_hand_worked() -> None:
    datum = datum_from_tokens_weights([10, 11, 12, 13], [0, 0, 1, 1])
    assert datum.model_input.to_ints() == [10, 11, 12]
    assert datum.loss_fn_inputs["target_tokens"].tolist() == [11, 12, 13]
    assert datum.loss_fn_inputs["weights"].tolist() == [0.0, 1.0, 1.0]


def test_truncation_cuts_from_the_right() -> None:
    datum = datum_from_tokens_weights([1, 2, 3, 4, 5], [1, 1, 1, 1, 1], max_length=3)
    assert datum.model_input.to_ints() == [1, 2]
    assert datum.loss_fn_inputs["target_tokens"].tolist() == [2, 3]


def test_mean_reduction_normalises_per_example() -> None:
    datum = datum_from_tokens_weights([1, 2, 3, 4], [0, 1, 1, 1], reduction="mean")
    assert datum.loss_fn_inputs["weights"].tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 3])


def test_too_short_is_an_error() -> None:
    with pytest.raises(SequenceTooShortError):
        datum_from_tokens_weights([1], [1])
    with pytest.raises(ValueError, match="3 tokens but 2 weights"):
        datum_from_tokens_weights([1, 2, 3], [1, 1])


@given(
    tokens=st.lists(st.integers(0, 1000), min_size=2, max_size=40),
    max_length=st.one_of(st.none(), st.integers(2, 50)),
)
def test_shift_properties(tokens: list[int], max_length: int | None) -> None:
    weights = [float(i % 2) for i in range(len(tokens))]
    datum = datum_from_tokens_weights(tokens, weights, max_length)
    kept = tokens[: max_length or len(tokens)]
    inputs = datum.model_input.to_ints()
    targets = datum.loss_fn_inputs["target_tokens"].tolist()
    assert len(inputs) == len(targets) == len(kept) - 1
    assert inputs + targets[-1:] == kept
    assert datum.loss_fn_inputs["weights"].tolist() == weights[1 : len(kept)]


def test_prompt_completion_weights() -> None:
    assert prompt_completion_tokens([1, 2], [3]) == ([1, 2, 3], [0.0, 0.0, 1.0])


def test_mean_nll_hand_worked() -> None:
    logprobs = [torch.tensor([-1.0, -2.0]), torch.tensor([-4.0])]
    weights = [torch.tensor([1.0, 0.0]), torch.tensor([1.0])]
    assert mean_nll(logprobs, weights) == pytest.approx(2.5)
    assert math.isnan(mean_nll([torch.tensor([-1.0])], [torch.tensor([0.0])]))


BYTES = {1: b"a", 2: b"\xc3", 3: b"\xa9", 4: b"<eos>"}
"""A toy byte-level vocabulary: tokens 2 and 3 together spell "\u00e9" (two UTF-8 bytes)."""


def _decode(ids: list[int]) -> str:
    return b"".join(BYTES[i] for i in ids).decode("utf-8", errors="replace")


def test_scored_bytes_decodes_each_run_of_scored_tokens_whole() -> None:
    # "a" + "\u00e9" scored, token 4 unscored: 1 + 2 bytes; decoded one token at a time the split
    # character would count as two replacement characters (6 bytes)
    # (a datum's targets are the tokens after the first)
    assert scored_bytes(datum_from_tokens_weights([4, 1, 2, 3, 4], [0, 1, 1, 1, 0]), _decode) == 3
    assert scored_bytes(datum_from_tokens_weights([1, 2, 4, 3], [0, 1, 0, 1]), _decode) == 6  # two broken halves
    assert scored_bytes(datum_from_tokens_weights([1, 2, 3], [1, 0, 0]), _decode) == 0


def test_bits_per_byte_hand_worked() -> None:
    # two tokens at probability 1/2 each (one bit) spelling three bytes: 2/3 bit per byte
    nll_D = sequence_nll([torch.tensor([-math.log(2), -math.log(2), -5.0])], [torch.tensor([1.0, 1.0, 0.0])])
    assert nll_D == pytest.approx([2 * math.log(2)])
    assert bits_per_byte(nll_D, [3]) == pytest.approx(2 / 3)
    assert math.isnan(bits_per_byte(nll_D, [0]))


@given(st.lists(st.floats(-10, 0), min_size=1, max_size=20), st.integers(1, 100))
def test_bits_per_byte_is_mean_nll_in_bits_per_byte(logprobs: list[float], n_bytes: int) -> None:
    logprobs_D, weights_D = [torch.tensor(logprobs)], [torch.ones(len(logprobs))]
    expected = mean_nll(logprobs_D, weights_D) * len(logprobs) / (math.log(2) * n_bytes)
    assert bits_per_byte(sequence_nll(logprobs_D, weights_D), [n_bytes]) == pytest.approx(expected, rel=1e-5, abs=1e-9)
