"""The one way the local backend turns logits into logprobs.

Training, `compute_logprobs` and sampling all go through `log_softmax_f32`, in float32, on a model
that is always in eval mode; that shared path is what makes their logprobs agree on the same
weights (so `kl_sample_train` is ~0 on-policy).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import torch

from kitchen.ports import Tokenizer


def log_softmax_f32(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-probabilities over the last axis, in float32 (float64 for a float64 model), of
    `logits / temperature`."""
    if logits.dtype != torch.float64:
        logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1)


def left_pad(
    sequences_B: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stack token lists into one [B, L] tensor, padding on the left; also its mask and positions.

    Decoding appends to every row at once, so the rows must end together: pads go first, the
    attention mask hides them, and positions count real tokens only, so each row computes what
    it would alone.
    """
    width = max(len(tokens) for tokens in sequences_B)
    padded_BL = torch.full((len(sequences_B), width), pad_id, dtype=torch.long)
    mask_BL = torch.zeros((len(sequences_B), width), dtype=torch.long)
    for row, tokens in enumerate(sequences_B):
        padded_BL[row, width - len(tokens) :] = torch.tensor(tokens, dtype=torch.long)
        mask_BL[row, width - len(tokens) :] = 1
    positions_BL = (mask_BL.cumsum(-1) - 1).clamp(min=0)
    return padded_BL.to(device), mask_BL.to(device), positions_BL.to(device)


def pad_token_id(tokenizer: Tokenizer) -> int:
    """The tokenizer's pad id, else 0: pads are never scored nor attended to, so any id serves."""
    pad_id = getattr(tokenizer, "pad_token_id", None)
    return int(pad_id) if pad_id is not None else 0


def target_logprobs(model: torch.nn.Module, input_ids_BL: torch.Tensor, targets_BL: torch.Tensor) -> torch.Tensor:
    """Logprob of each target token given the inputs up to and including its position: [B, L]."""
    logits_BLV = model(input_ids=input_ids_BL, use_cache=False).logits
    return log_softmax_f32(logits_BLV).gather(-1, targets_BL.unsqueeze(-1)).squeeze(-1)


def vocab_size(model: torch.nn.Module) -> int:
    """How many token ids the model's embedding accepts."""
    embedding = cast(Callable[[], torch.nn.Module], model.get_input_embeddings)()
    assert isinstance(embedding, torch.nn.Embedding)
    return embedding.num_embeddings
