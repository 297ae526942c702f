"""Packed rows whose padding only attention sees.

Packing (`adapters.local.forward_pass`) lays sequences into [B, W] rows; the slots past a row's
last token are padding, ~10% of a DPO batch's slots. Only attention needs the row layout (its
mask is per row); every other layer (projections, MLP, norms, rotary embeddings) works token by
token. So the model runs on the N real tokens as one [1, N] sequence, and an attention function
registered with transformers (`ROWS_ATTENTION`) scatters queries, keys and values into the [B, W]
rows, runs the model's own attention (sdpa or eager) there under the packed mask, and gathers the
N outputs back: the matmuls do N slots' work instead of B x W (8-10% fewer on a DPO batch of
polite_arithmetic), and each token computes what it computes in the padded rows. Where it costs
less, attention runs instead over each sequence alone (`SequenceLayout`: a token shared by several
sequences is a query in each, its keys and values computed once; plain causal attention, no
mask), which on a DPO batch of one-turn pairs is a third of the rows' attention scores; as no
row is then attended over, the packing puts the batch's whole prefix trie in one row. Row for row the
forward is the padded one's (a matmul's output row does not depend on the other rows: on every
batch of the rlhf recipe the logprobs came out bitwise equal here); the weight gradients sum over
N rows instead of B x W, so they differ in float rounding (at most 4.3e-7 of the largest there).

The attention function is named on the model's config only for the forward pass (not for
gradient checkpointing's recomputation, nor inside a compiled body: those keep the padded rows);
that is safe because each model (and its config) is run by one thread at a time: the training
client's worker, or the sampling thread for the snapshots and reference models it owns.
On CUDA (`attention_route`) the batch's whole prefix trie runs as one row and attention is
PyTorch's FlexAttention under a document mask (`TrieLayout`): no [rows, width, width] mask is
built on the host or copied, no query repeats, and SDPA's slower masked kernels and repeated
K/V heads are not needed. The CPU keeps the rows and per-sequence layouts above (its tuned path).

Whether a model can run so is decided once, before its first scoring pass, by a three-token
probe (`may_run_unpadded`): a model whose layers do not pass keyword arguments through to their
attention function is then scored on padded rows, and that is logged. No other error is taken
for a "cannot": an out-of-memory or CUDA error in a real pass is raised, never turned into a
quiet fallback (under FSDP one worker falling back alone would leave the others waiting in a
collective).
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch

from adapters.common.training_batch import row_slots
from adapters.local.mixed_precision import compute_dtype

ROWS_ATTENTION = "kitchen_unpadded_rows"
"""The attention implementation's name in transformers' registry, while a forward runs unpadded."""


@dataclass(frozen=True)
class RowLayout:
    """Where the N tokens of the [1, N] sequence sit in the [rows, width] packed rows."""

    filled_N: torch.Tensor
    """Each token's slot in the flattened rows, in order."""
    rows: int
    width: int
    attention: str
    """The model's own attention implementation, run on the rows."""


@dataclass(frozen=True)
class SequenceLayout:
    """The N tokens as the D sequences they make up ([D, L], right-padded): a token that several
    sequences share stands in each of them, so each sequence's attention is plain causal attention
    over its own tokens, with no mask to build or apply. Its output is taken from one copy: all
    copies see the same keys at the same positions, so they are equal."""

    index_DL: torch.Tensor
    """Each sequence's tokens, as places among the N (pads: 0; they come after a sequence's last
    token, so causal attention never lets a real token see them)."""
    copy_N: torch.Tensor
    """For each of the N tokens, the place in the flattened [D, L] grid its output comes from."""
    attention: str
    causal_1LL: torch.Tensor | None
    """The causal mask for implementations that need one (sdpa: None, which means causal)."""

    @classmethod
    def of(
        cls, tokens_N: torch.Tensor, lengths_D: list[int], tokens: int, attention: str, dtype: torch.dtype
    ) -> SequenceLayout:
        """From each sequence's tokens as places among the N (`tokens_N`: the sequences' places,
        concatenated in order; `tokens` = N), for the model's `attention` and `dtype`."""
        width, device = max(lengths_D), tokens_N.device
        index_DL = tokens_N.new_zeros((len(lengths_D), width))
        grid_N = row_slots(lengths_D, width, device)
        index_DL.view(-1)[grid_N] = tokens_N
        copy_N = torch.full((tokens,), len(lengths_D) * width, dtype=torch.long, device=device)
        causal = None
        if attention != "sdpa":
            above = torch.ones((width, width), dtype=torch.bool, device=device).triu(1)
            causal = torch.zeros((1, 1, width, width), dtype=dtype, device=device).masked_fill_(
                above, torch.finfo(dtype).min
            )
        return cls(index_DL, copy_N.scatter_reduce_(0, tokens_N, grid_N, "amin"), attention, causal)


@dataclass(frozen=True)
class TrieLayout:
    """The N tokens as the batch's whole prefix trie in one row, depth-first (each segment followed
    by its descendants), attended by FlexAttention under a document mask: a query at slot q may
    read the key at slot kv when kv <= q < `subtree_end_N[kv]` (the key's segment is the query's own
    or one of its ancestors). No [N, N] mask is materialised (FlexAttention skips the blocks the
    rule excludes), no query is repeated, no slot is padding."""

    block_mask: Any
    """FlexAttention's BlockMask of the rule above."""


def _to_rows(states_1HNd: torch.Tensor, layout: RowLayout) -> torch.Tensor:
    """[1, heads, N, d] -> [rows, heads, width, d], zeros in the pad slots (their own segment: no
    token attends to them)."""
    heads, dim = states_1HNd.shape[1], states_1HNd.shape[3]
    tokens_NHd = states_1HNd[0].transpose(0, 1)
    slots_SHd = tokens_NHd.new_zeros((layout.rows * layout.width, heads, dim))
    rows_BWHd = slots_SHd.index_copy(0, layout.filled_N, tokens_NHd).view(layout.rows, layout.width, heads, dim)
    return rows_BWHd.transpose(1, 2)


def _to_sequences(states_1HNd: torch.Tensor, index_DL: torch.Tensor) -> torch.Tensor:
    """[1, heads, N, d] -> [D, heads, L, d]: each sequence's tokens. A row gather (whose backward
    adds rows) rather than advanced indexing (whose backward scatters element by element: twice
    the time on the CPU)."""
    (sequences, width), heads, dim = index_DL.shape, states_1HNd.shape[1], states_1HNd.shape[3]
    tokens_NHd = states_1HNd[0].transpose(0, 1)
    return tokens_NHd.index_select(0, index_DL.flatten()).view(sequences, width, heads, dim).transpose(1, 2)


def rows_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The model's attention over the packed rows, for the [1, N] unpadded sequence: [1, N, heads, d]."""
    layout = kwargs.pop("kitchen_rows", None)
    if isinstance(layout, TrieLayout):
        enable_gqa = query.shape[1] != key.shape[1]
        attend_trie = _flex_attention(query.device.type)
        output_1HNd = attend_trie(
            query, key, value, block_mask=layout.block_mask, scale=kwargs.get("scaling"), enable_gqa=enable_gqa
        )
        return output_1HNd.transpose(1, 2), None
    if not isinstance(layout, RowLayout | SequenceLayout):
        raise _LayoutNotPassed("this model's layers do not pass keyword arguments to their attention function")
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama.modeling_llama import eager_attention_forward

    attend = ALL_ATTENTION_FUNCTIONS.get_interface(layout.attention, eager_attention_forward)
    if isinstance(layout, SequenceLayout):
        sequences = [_to_sequences(states, layout.index_DL) for states in (query, key, value)]
        output_DLHd, _ = attend(module, *sequences, layout.causal_1LL, **kwargs)
        heads, dim = output_DLHd.shape[2], output_DLHd.shape[3]
        return output_DLHd.reshape(-1, heads, dim).index_select(0, layout.copy_N)[None], None
    rows = [_to_rows(states, layout) for states in (query, key, value)]
    output_BWHd, _ = attend(module, *rows, attention_mask, **kwargs)
    heads, dim = output_BWHd.shape[2], output_BWHd.shape[3]
    return output_BWHd.reshape(-1, heads, dim).index_select(0, layout.filled_N)[None], None


@functools.cache
def _register() -> None:
    """Name `rows_attention` in transformers' registries (once per process)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ROWS_ATTENTION, rows_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ROWS_ATTENTION, sdpa_mask)  # unused: the 4D mask is passed in


class _LayoutNotPassed(TypeError):
    """The model's layers did not pass keyword arguments through to their attention function."""


_WORKS: weakref.WeakKeyDictionary[torch.nn.Module, bool] = weakref.WeakKeyDictionary()
"""Whether a model runs unpadded, as its probe found."""

log = logging.getLogger("kitchen.local")


def may_run_unpadded(model: torch.nn.Module) -> bool:
    """Not when its layers recompute in the backward pass (gradient checkpointing) or its body is
    compiled (the attention name would change under the compiled graph), nor when its probe
    (`_probe`, once per model) found that its layers do not pass the layout through. Every worker
    of a sharded model asks at its first scoring pass, whatever its data, so all of them probe
    (and run the probe's collectives) at the same point and decide alike."""
    # transformers 5 renamed `is_gradient_checkpointing` (the old name warns)
    renamed = hasattr(model, "is_activation_checkpointing")
    if getattr(model, "is_activation_checkpointing" if renamed else "is_gradient_checkpointing", False):
        return False
    if any(getattr(module, "_compiled_call_impl", None) is not None for module in model.modules()):
        return False
    works = _WORKS.get(model)
    if works is None:
        works = _WORKS[model] = _probe(model)
    return works


PROBE_TOKENS = 3


def _probe(model: torch.nn.Module) -> bool:
    """Run `PROBE_TOKENS` tokens through the model unpadded (one row, no gradients, eval mode):
    False, logged, only when its layers do not pass the layout to the attention function; any
    other error is raised."""
    device = next(model.parameters()).device
    filled_N = torch.arange(PROBE_TOKENS, device=device)
    dtype = compute_dtype(model)
    above = torch.ones((PROBE_TOKENS, PROBE_TOKENS), dtype=torch.bool, device=device).triu(1)
    mask = torch.zeros((1, 1, PROBE_TOKENS, PROBE_TOKENS), dtype=dtype, device=device)
    model_inputs = {
        "input_ids": filled_N[None],
        "position_ids": filled_N[None],
        "attention_mask": mask.masked_fill_(above, torch.finfo(dtype).min),
    }
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            run_unpadded(model, lambda inputs: model(**inputs, use_cache=False), model_inputs, filled_N)
    except _LayoutNotPassed:
        name = type(model).__name__
        log.warning("%s: its layers do not pass the packed layout to attention; scored on padded rows", name)
        return False
    finally:
        model.train(training)
    return True


@contextmanager
def _attention_named(config: Any, name: str) -> Iterator[None]:
    previous = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = previous


def run_unpadded(
    model: torch.nn.Module,
    forward: Any,
    model_inputs: Mapping[str, torch.Tensor],
    filled_N: torch.Tensor,
    sequences: tuple[torch.Tensor, list[int]] | None = None,
) -> Any:
    """`forward(inputs)` on the real tokens of packed `model_inputs` ([rows, width] input ids and
    position ids, and for attention over the rows their [rows, 1, width, width] mask), as a [1, N]
    sequence: its result (for a model `may_run_unpadded` accepts). Attention runs over the packed
    rows, or, given `sequences` (each sequence's tokens as places among the N, concatenated, and
    the sequences' lengths), over each sequence on its own (`SequenceLayout`)."""
    config = model.config.get_text_config(decoder=True)  # type: ignore[union-attr, operator]
    rows, width = model_inputs["input_ids"].shape
    layout: RowLayout | SequenceLayout = RowLayout(filled_N, rows, width, config._attn_implementation)
    if sequences is not None:
        layout = SequenceLayout.of(*sequences, int(filled_N.numel()), config._attn_implementation, compute_dtype(model))
    inputs = {
        "input_ids": model_inputs["input_ids"].flatten().index_select(0, filled_N)[None],
        "position_ids": model_inputs["position_ids"].flatten().index_select(0, filled_N)[None],
        # a 4D mask reaches the attention function untouched; per-sequence attention reads none, but
        # without one transformers would build its own [N, N] mask from the position ids
        "attention_mask": model_inputs.get("attention_mask", filled_N.new_zeros((1, 1, 1, 1), dtype=torch.bool)),
        "kitchen_rows": layout,
    }
    _register()
    with _attention_named(config, ROWS_ATTENTION):
        return forward(inputs)


AttentionRoute = Literal["mask", "flex"]
"""How unpadded packed sequences attend: over masked rows (or each sequence alone), the CPU's
tuned path; or as one prefix-trie row under FlexAttention (`TrieLayout`), CUDA's."""

_ROUTES: weakref.WeakKeyDictionary[torch.nn.Module, AttentionRoute] = weakref.WeakKeyDictionary()


def attention_route(model: torch.nn.Module) -> AttentionRoute:
    """ "flex" on CUDA (where this torch has FlexAttention: compiled Triton kernels that skip the
    masked blocks), "mask" elsewhere, unless `set_attention_route` chose. It depends on the device
    only, so every worker of a sharded model takes the same route."""
    chosen = _ROUTES.get(model)
    return chosen if chosen is not None else device_route(next(model.parameters()).device.type)


def device_route(device_type: str) -> AttentionRoute:
    """The route a model on a `device_type` device takes unless told otherwise."""
    return "flex" if device_type == "cuda" and _has_flex() else "mask"


def set_attention_route(model: torch.nn.Module, route: AttentionRoute) -> None:
    """Choose `model`'s route (the flex route runs on the CPU too, uncompiled: for tests and checks)."""
    _ROUTES[model] = route


@functools.cache
def _has_flex() -> bool:
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _flex_attention(device_type: str) -> Any:
    """FlexAttention, compiled on CUDA (its fused kernels; shapes go dynamic after the first
    recompile), as is elsewhere (the reference implementation: correct, unfused)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention) if device_type == "cuda" else flex_attention


@functools.cache
def _compiled_block_masks() -> Any:
    from torch.nn.attention.flex_attention import create_block_mask

    return torch.compile(create_block_mask)


def trie_block_mask(subtree_end_N: torch.Tensor) -> Any:
    """The BlockMask of `TrieLayout`'s rule, built on the tokens' device (compiled on CUDA, so that
    no [N, N] tensor is made even while building it)."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(batch: Any, head: Any, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return (kv <= q) & (q < subtree_end_N[kv])

    tokens, device = int(subtree_end_N.numel()), subtree_end_N.device
    build = _compiled_block_masks() if device.type == "cuda" else create_block_mask
    return build(mask_mod, None, None, tokens, tokens, device=device)


def run_trie(
    model: torch.nn.Module,
    forward: Any,
    input_ids_N: torch.Tensor,
    position_ids_N: torch.Tensor,
    subtree_end_N: torch.Tensor,
) -> Any:
    """`forward(inputs)` on the prefix-trie row ([1, N] input ids and position ids) with attention
    by `TrieLayout` (for a model `may_run_unpadded` accepts)."""
    config = model.config.get_text_config(decoder=True)  # type: ignore[union-attr, operator]
    inputs = {
        "input_ids": input_ids_N[None],
        "position_ids": position_ids_N[None],
        # the layout carries the mask; without one transformers would build its own [N, N] mask
        "attention_mask": input_ids_N.new_zeros((1, 1, 1, 1), dtype=torch.bool),
        "kitchen_rows": TrieLayout(trie_block_mask(subtree_end_N)),
    }
    _register()
    with _attention_named(config, ROWS_ATTENTION):
        return forward(inputs)
