"""The padded batch both in-process backends build from datums: its layout, and the token-id
check that names the first datum outside the vocabulary."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from adapters.common.training_batch import build_training_batch, right_pad
from kitchen.engine.errors import DataError
from train_core.supervised import datum_from_tokens_weights
from train_core.types import Datum, TensorData

CPU = torch.device("cpu")


@given(st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=9), min_size=1, max_size=6), st.integers(-1, 60))
def test_right_pad_keeps_each_row_and_pads_the_rest(rows: list[list[int]], pad_id: int) -> None:
    padded_BL = right_pad(rows, pad_id, CPU)
    assert padded_BL.shape == (len(rows), max(map(len, rows)))
    for row, tokens in zip(padded_BL.tolist(), rows, strict=True):
        assert row == tokens + [pad_id] * (len(row) - len(tokens))


def _datum(tokens: list[int], targets: list[int] | None = None) -> Datum:
    datum = datum_from_tokens_weights(tokens, [1.0] * len(tokens))
    if targets is None:
        return datum
    return Datum(datum.model_input, {**datum.loss_fn_inputs, "target_tokens": TensorData.from_list(targets, "int64")})


def _build(data: list[Datum], pad_id: int = 0) -> object:
    return build_training_batch(data, ["target_tokens", "weights"], "test", ["weights"], pad_id, 100, CPU)


def test_the_first_datum_with_an_id_outside_the_vocabulary_is_named() -> None:
    good = _datum([1, 2, 3, 4])
    with pytest.raises(DataError, match=r"datum 2: model_input has token ids \[100\] outside the vocabulary"):
        _build([good, good, _datum([5, 100, 7]), _datum([-1, 2, 3])])
    with pytest.raises(DataError, match=r"datum 1: target_tokens has token ids \[-3\] outside"):
        _build([good, _datum([1, 2, 3], targets=[2, -3]), good])


def test_a_padding_id_outside_the_vocabulary_is_no_error_but_hides_none() -> None:
    short, long = _datum([1, 2]), _datum([1, 2, 3, 4, 5])
    batch = build_training_batch([short, long], ["target_tokens"], "test", [], 100, 100, CPU)
    assert batch.input_ids_BL.tolist() == [[1, 100, 100, 100], [1, 2, 3, 4]]
    with pytest.raises(DataError, match=r"datum 2: model_input has token ids \[101\]"):
        _build([short, long, _datum([1, 101, 2])], pad_id=100)
