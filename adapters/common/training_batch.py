"""Validate a list of datums and turn it into the tensors of one padded forward pass."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from adapters.common.requests import check_token_ids
from kitchen.engine.errors import DataError
from train_core.losses import TARGET_TOKENS, require_inputs
from train_core.types import Datum, ImageChunk, TensorData, numbers_tensor


def right_pad(sequences_B: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> torch.Tensor:
    """Stack token lists into one [B, L] tensor, padding on the right.

    Right padding needs no attention mask: a causal model never lets a real token see the pads
    that follow it, so real positions compute exactly what they would alone.
    """
    lengths_B = torch.tensor([len(tokens) for tokens in sequences_B])
    padded_BL = torch.full((len(sequences_B), int(lengths_B.max())), pad_id, dtype=torch.long)
    # one conversion for the batch; a row-major mask takes the tokens in their flat order
    padded_BL[torch.arange(padded_BL.shape[1]) < lengths_B[:, None]] = numbers_tensor(
        lambda: itertools.chain.from_iterable(sequences_B), "int64"
    )
    return padded_BL.to(device)


def row_slots(lengths_B: Sequence[int], width: int, device: torch.device) -> torch.Tensor:
    """Where the tokens of rows of `lengths_B` tokens, each padded on the right to `width`, sit in
    the flattened [B * width] rows: row by row, in order."""
    return torch.cat([torch.arange(length) + row * width for row, length in enumerate(lengths_B)]).to(device)


@dataclass(frozen=True)
class TrainingBatch:
    """Right-padded inputs and targets, the true length of each datum, and its loss inputs."""

    input_ids_BL: torch.Tensor
    targets_BL: torch.Tensor
    lengths_D: list[int]
    loss_inputs: dict[str, torch.Tensor]
    """Each requested loss_fn_inputs key, concatenated over datums (all their tokens in order)."""
    images: tuple[ImageChunk, ...] = ()
    """The datums' images in order (their positions hold the image placeholder id in the inputs)."""

    def split(self, values_BL: torch.Tensor) -> list[torch.Tensor]:
        """The unpadded row of each datum: [L_d] each."""
        return [values_BL[row, :length] for row, length in enumerate(self.lengths_D)]


def build_training_batch(
    data: Sequence[Datum],
    required_keys: Sequence[str],
    user: str,
    float_keys: Sequence[str],
    pad_id: int,
    vocab_size: int,
    device: torch.device,
    image_token_id: int | None = None,
) -> TrainingBatch:
    """Check every datum (required keys present, lengths equal, token ids in the vocabulary) and
    stack the batch. `user` names who reads `required_keys` (for errors); `float_keys` are the loss
    inputs to concatenate for the loss function. Image positions hold `image_token_id` (a backend
    whose model takes no images passes None, and a datum with images is refused)."""
    if not data:
        raise DataError("got an empty list of datums; a forward pass needs at least one")
    inputs_D: list[list[int]] = []
    targets_D: list[list[int]] = []
    for index, datum in enumerate(data):
        where = f"datum {index}"
        require_inputs(datum.loss_fn_inputs.keys(), required_keys, user, where)
        if image_token_id is None and datum.model_input.images:
            raise DataError(f"{where}: model_input holds images, but this model takes no images")
        tokens = datum.model_input.token_ids(image_token_id or 0)
        if not tokens:
            raise DataError(f"{where}: model_input is empty")
        for key in required_keys:
            shape = datum.loss_fn_inputs[key].shape
            if shape != (len(tokens),):
                raise DataError(
                    f"{where}: loss_fn_inputs[{key!r}] has shape {shape}, "
                    f"expected ({len(tokens)},) to match model_input"
                )
        inputs_D.append(tokens)
        targets_D.append(list(map(int, datum.loss_fn_inputs[TARGET_TOKENS].data)))
    cpu = torch.device("cpu")
    input_ids_BL, targets_BL = right_pad(inputs_D, pad_id, cpu), right_pad(targets_D, pad_id, cpu)
    for what, ids_BL, ids_D in (("model_input", input_ids_BL, inputs_D), (TARGET_TOKENS, targets_BL, targets_D)):
        # one range check for the whole batch; the rows it flags are looked at one by one (a
        # padding id outside the vocabulary flags rows with nothing wrong in them)
        for index in ((ids_BL < 0) | (ids_BL >= vocab_size)).any(dim=1).nonzero().flatten().tolist():
            check_token_ids(ids_D[index], vocab_size, f"datum {index}: {what}")
    loss_inputs = {
        key: TensorData.concat([d.loss_fn_inputs[key] for d in data], "float32").to(device) for key in float_keys
    }
    return TrainingBatch(
        input_ids_BL=input_ids_BL.to(device),
        targets_BL=targets_BL.to(device),
        lengths_D=[len(tokens) for tokens in inputs_D],
        loss_inputs=loss_inputs,
        images=tuple(image for datum in data for image in datum.model_input.images),
    )
