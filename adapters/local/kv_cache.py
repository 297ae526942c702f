"""The sampler's KV cache: prompts prefilled packed, then decoded in buffers written in place.

Prefill: prompts of different lengths, left-padded into one batch, would send every pad through
the model (on the benchmark's prompts of 8 to 40 tokens, 608 positions for 350 tokens). Instead
they run packed end to end, in rows of up to the sampler's PACK_TOKENS, under a block-diagonal
causal mask (`packed_inputs`), and
their keys and values are then laid out left-padded, one row per sample (`unpacked_cache`).

Decode: Hugging Face's `DynamicCache` grows by `torch.cat`, copying every layer's whole cache on
each step (quadratic in the decode length). Here each layer's keys and values live in buffers with
room for more positions: a step writes one slot and attention reads a view of the filled part. A
full buffer is reallocated at twice the size, so a long decode copies its cache O(log n) times
and never holds more than twice what it uses (no context-length budget allocated up front).
Attention sees the same values as with the dynamic cache, so the logits match it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicLayer


class PreallocatedLayer(CacheLayerMixin):
    """One layer's keys and values in [B, heads, capacity, head_dim] buffers, filled from the left."""

    is_sliding = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        super().__init__()
        self._key_buffer, self._value_buffer = keys, values
        self._length = length
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Never needed: the buffers exist from the start."""

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new states after the filled part; return views of everything filled so far."""
        end = self._length + key_states.shape[-2]
        if end > self._key_buffer.shape[-2]:
            self._key_buffer = _grown(self._key_buffer, self._length, end)
            self._value_buffer = _grown(self._value_buffer, self._length, end)
        self._key_buffer[:, :, self._length : end].copy_(key_states)
        self._value_buffer[:, :, self._length : end].copy_(value_states)
        self._length = end
        self.keys, self.values = self._key_buffer[:, :, :end], self._value_buffer[:, :, :end]
        return self.keys, self.values

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Keep (or repeat) the rows `beam_idx`: finished samples leave the batch."""
        self._key_buffer, self._value_buffer = self._key_buffer[beam_idx], self._value_buffer[beam_idx]
        self.keys, self.values = self._key_buffer[:, :, : self._length], self._value_buffer[:, :, : self._length]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """Attention spans the filled part and the new tokens, from position 0 (as a dynamic layer)."""
        return self._length + query_length, 0

    def get_seq_length(self) -> int:
        return self._length

    def get_max_length(self) -> int:
        return -1  # grows on demand, as a dynamic layer


def _grown(buffer: torch.Tensor, length: int, needed: int) -> torch.Tensor:
    """A buffer of at least twice the capacity holding the first `length` positions of `buffer`."""
    shape = list(buffer.shape)
    shape[-2] = max(needed, 2 * shape[-2])
    grown = buffer.new_empty(shape)
    grown[:, :, :length] = buffer[:, :, :length]
    return grown


def packed_inputs(
    prompts: Sequence[Sequence[int]], dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """The prompts end to end as one row: input ids [1, S], positions [1, S] (each prompt from 0),
    an additive mask [1, 1, S, S] letting each token see only its own prompt's earlier tokens
    (None for one prompt: plain causal attention), and the index of each prompt's last token [P]."""
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    input_ids = torch.tensor([token for prompt in prompts for token in prompt], device=device).unsqueeze(0)
    prompt_of_S = torch.repeat_interleave(torch.arange(len(prompts), device=device), lengths)
    starts_P = lengths.cumsum(0) - lengths
    positions_S = torch.arange(input_ids.shape[1], device=device) - starts_P[prompt_of_S]
    mask = None
    if len(prompts) > 1:
        index_S = torch.arange(input_ids.shape[1], device=device)
        visible_SS = (prompt_of_S[:, None] == prompt_of_S[None, :]) & (index_S[:, None] >= index_S[None, :])
        mask = torch.zeros(visible_SS.shape, dtype=dtype, device=device)
        mask = mask.masked_fill(~visible_SS, torch.finfo(dtype).min)[None, None]
    return input_ids, positions_S.unsqueeze(0), mask, starts_P + lengths - 1


def unpacked_cache(packed: Sequence[Cache], source_BW: torch.Tensor, mask_BW: torch.Tensor, room: int) -> Cache:
    """A cache of B left-padded rows built from the caches of packed prefills (one row each, taken
    end to end): slot [b, w] holds packed position `source_BW[b, w]`, pads (mask 0) hold zeros
    (never attended to, but finite: a NaN would survive the zero attention weight). Each row then
    has `room` free positions before the buffers first grow."""
    return Cache(
        layers=[
            _unpacked_layer(chunks, source_BW, mask_BW, room)
            for chunks in zip(*(cache.layers for cache in packed), strict=True)
        ]
    )


def _unpacked_layer(
    chunks: Sequence[CacheLayerMixin], source_BW: torch.Tensor, mask_BW: torch.Tensor, room: int
) -> PreallocatedLayer:
    """One layer of `unpacked_cache` from that layer's packed chunks."""
    if not all(type(chunk) is DynamicLayer and chunk.keys is not None for chunk in chunks):
        raise TypeError(f"packed prefill needs plain full-attention cache layers, got {chunks[0]!r}")
    buffers = []
    for states in ("keys", "values"):
        states_HSD = torch.cat([getattr(chunk, states)[0] for chunk in chunks], dim=-2)
        heads, _, dim = states_HSD.shape
        width = source_BW.shape[1]
        buffer = states_HSD.new_empty((len(source_BW), heads, width + room, dim))
        buffer[:, :, :width] = states_HSD[:, source_BW].permute(1, 0, 2, 3)
        buffer[:, :, :width].masked_fill_(mask_BW[:, None, :, None] == 0, 0.0)
        buffers.append(buffer)
    return PreallocatedLayer(buffers[0], buffers[1], source_BW.shape[1])
