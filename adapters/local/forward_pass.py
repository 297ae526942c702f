"""The one way the local backend turns logits into logprobs.

Training, `compute_logprobs` and sampling all go through `log_softmax_f32`, in float32, on a model
that is always in eval mode; that shared path is what makes their logprobs agree on the same
weights (so `kl_sample_train` is ~0 on-policy). Training and scoring take the logprobs from the
final hidden states a chunk of tokens at a time (`adapters.local.token_scoring`), never from the
whole [tokens, vocab] logits.

Training and `compute_logprobs` score whole batches of sequences (`sequence_logprobs`) packed
into rows: sequences that share a long prefix (a DPO pair's chosen and rejected replies after one
prompt, a group of RL samples of one prompt) run that prefix once, prefix then each one's own
suffix, and short sequences share a row instead of padding to the longest. An attention mask
lets each suffix see only its prefix and itself, and position ids restart every suffix where its
prefix ends, so each sequence computes what it would alone (within float rounding), on fewer
tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch

from adapters.common.training_batch import right_pad
from adapters.local.token_scoring import Entropy, LogprobMethod, output_head, score_tokens
from adapters.local.unpadded_rows import may_run_unpadded, run_unpadded
from kitchen.ports import Tokenizer

MIN_SHARED_PREFIX = 8
"""Sequences share a prefix only when they start with at least this many equal tokens."""
MIN_PACKING_SAVING = 0.1
"""Pack only when it saves at least this fraction of the right-padded batch's token slots: the
mask costs memory and keeps GPU attention off its fastest (mask-free causal) kernel."""


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


Group = tuple[int, list[int]]
"""Sequences sharing a prefix: (its length, their indices); a lone sequence is its own prefix."""


def _shared_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` have in common."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def prefix_groups(inputs_D: Sequence[Sequence[int]]) -> list[Group]:
    """Sequences to pack together, as (shared prefix length, indices): sorting brings sequences
    with a common prefix next to each other; one joins the group before it when they share at
    least MIN_SHARED_PREFIX tokens and the packed row stays within twice the longest sequence (a
    row's attention grows with the square of its length, so one shared system prompt must not
    fold a whole batch into one row)."""
    row_limit = 2 * max(len(tokens) for tokens in inputs_D)
    groups: list[Group] = []
    row_length = 0
    for index in sorted(range(len(inputs_D)), key=lambda i: tuple(inputs_D[i])):
        tokens = inputs_D[index]
        if groups:
            prefix, members = groups[-1]
            shared = _shared_length(inputs_D[members[0]][:prefix], tokens)
            # a shorter prefix moves its lost tokens into every member's suffix
            packed = row_length + (prefix - shared) * (len(members) - 1) + len(tokens) - shared
            if shared >= MIN_SHARED_PREFIX and packed <= row_limit:
                groups[-1] = (shared, [*members, index])
                row_length = packed
                continue
        groups.append((len(tokens), [index]))
        row_length = len(tokens)
    return groups


def _group_length(inputs_D: Sequence[Sequence[int]], group: Group) -> int:
    prefix, members = group
    return prefix + sum(len(inputs_D[i]) - prefix for i in members)


MAX_PACKED_WIDTH = 1024
"""Rows grow past the longest group (to fit more groups per row) only up to this many tokens: the
attention mask is [rows, width, width]."""


def _first_fit(lengths: Sequence[int], width: int) -> list[list[int]]:
    """Group indices laid into rows of `width` slots, first-fit by decreasing length."""
    rows: list[list[int]] = []
    room: list[int] = []
    for g in sorted(range(len(lengths)), key=lambda g: -lengths[g]):
        row = next((r for r, free in enumerate(room) if lengths[g] <= free), None)
        if row is None:
            rows.append([])
            room.append(width)
            row = len(rows) - 1
        rows[row].append(g)
        room[row] -= lengths[g]
    return rows


def _row_cost(lengths: Sequence[int], rows: list[list[int]], attention_tokens: float, unpadded: bool) -> float:
    """The model work of `rows` padded to their longest, in token slots: each slot costs
    width / `attention_tokens` (attention over the whole row, masked or not) plus 1 (the layers'
    matmuls), or, `unpadded`, only the real tokens pay the matmuls (`adapters.local.unpadded_rows`)."""
    width = max(sum(lengths[g] for g in row) for row in rows)
    slots = len(rows) * width
    return (sum(lengths) if unpadded else slots) + slots * width / attention_tokens


def pack_rows(
    inputs_D: Sequence[Sequence[int]], attention_tokens: float | None = None, unpadded: bool = False
) -> list[list[Group]]:
    """`prefix_groups` laid into rows, first-fit by decreasing length: short sequences fill the room
    that padding would otherwise take. Rows are as wide as the longest group, or, given
    `attention_tokens` (the row width at which a token's attention costs as much as its matmuls:
    `attention_break_even`), as wide as costs least: fewer, wider rows waste fewer slots on padding,
    but every slot attends to the whole row (at most MAX_PACKED_WIDTH). Rows that run `unpadded`
    waste nothing on padding but attention, so they stay narrow."""
    groups = prefix_groups(inputs_D)
    lengths = [_group_length(inputs_D, group) for group in groups]
    longest = max(lengths)
    best = _first_fit(lengths, longest)
    if attention_tokens is not None:
        total = sum(lengths)
        widths = {-(-total // count) for count in range(1, len(lengths) + 1)}
        for width in sorted(w for w in widths if longest < w <= MAX_PACKED_WIDTH):
            rows = _first_fit(lengths, width)
            if _row_cost(lengths, rows, attention_tokens, unpadded) < _row_cost(
                lengths, best, attention_tokens, unpadded
            ):
                best = rows
    return [[groups[g] for g in row] for row in best]


def attention_break_even(model: torch.nn.Module) -> float | None:
    """The row width at which a token's attention (its query against every key, and the values:
    4 x width x attention width multiply-adds per layer, the mask skips none) costs as much as its
    share of the layer's matmuls (2 x the layer's weights): 6 x hidden size for the usual shapes
    (`pack_rows`). None when the config does not say."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    text_config = config.get_text_config(decoder=True)
    hidden, layers = getattr(text_config, "hidden_size", None), getattr(text_config, "num_hidden_layers", None)
    heads = getattr(text_config, "num_attention_heads", None)
    if not (isinstance(hidden, int) and isinstance(layers, int) and isinstance(heads, int)) or layers < 1:
        return None
    head_dim = getattr(text_config, "head_dim", None) or hidden // heads
    # The embedding is a lookup and the head runs on scored tokens only: neither grows with a row.
    tables = {id(p) for get in ("get_input_embeddings", "get_output_embeddings") for p in _parameters(model, get)}
    layer_weights = sum(p.numel() for p in model.parameters() if id(p) not in tables) / layers
    return 2 * layer_weights / (4 * heads * head_dim)


def _parameters(model: torch.nn.Module, getter: str) -> list[torch.nn.Parameter]:
    module = getattr(model, getter, lambda: None)()
    return list(module.parameters()) if isinstance(module, torch.nn.Module) else []


@dataclass(frozen=True)
class PackedRows:
    """Packed sequences: the model's inputs, and where each sequence's positions landed in the
    flattened [B * W] rows (the sequences' positions, concatenated in order)."""

    input_ids_BW: torch.Tensor
    position_ids_BW: torch.Tensor
    attention_mask_B1WW: torch.Tensor
    slots_N: torch.Tensor
    filled_N: torch.Tensor
    """The slots that hold a token, in order (the rest are padding)."""

    @property
    def filled(self) -> int:
        """How many of the rows' slots hold a token."""
        return int(self.filled_N.numel())


def pack_sequences(
    inputs_D: Sequence[Sequence[int]],
    pad_id: int,
    dtype: torch.dtype,
    device: torch.device,
    attention_tokens: float | None = None,
    unpadded: bool = False,
) -> PackedRows | None:
    """Pack the sequences by `pack_rows` (`attention_tokens`, `unpadded`: its row-width trade-off),
    or None when that saves less than MIN_PACKING_SAVING of the token slots of plain right padding
    (the slots the matmuls see: the rows', or the real tokens when the rows run `unpadded`).

    Every slot has a segment (a prefix, or one sequence's suffix) and the segment it reads from
    besides its own (a suffix's prefix; a prefix's is itself): a query attends to earlier slots of
    those two. The additive float mask (0 where a query may attend, the dtype's minimum elsewhere)
    works for every attention implementation that takes a 4D mask; pad slots form one segment,
    so no softmax row is empty (an empty one would be NaN, and NaN reaches the gradients)."""
    rows = pack_rows(inputs_D, attention_tokens, unpadded)
    row_lengths = [sum(_group_length(inputs_D, group) for group in row) for row in rows]
    work = sum(row_lengths) if unpadded else len(rows) * max(row_lengths)
    if work > (1 - MIN_PACKING_SAVING) * len(inputs_D) * max(map(len, inputs_D)):
        return None
    tokens_B: list[list[int]] = [[] for _ in rows]
    positions_B: list[list[int]] = [[] for _ in rows]
    segments_B: list[list[int]] = [[] for _ in rows]
    reads_B: list[list[int]] = [[] for _ in rows]
    slots_D: list[list[int]] = [[] for _ in inputs_D]
    for b, row in enumerate(rows):
        tokens, positions, segments, reads = tokens_B[b], positions_B[b], segments_B[b], reads_B[b]
        for prefix, members in row:
            start, prefix_segment = len(tokens), segments[-1] + 1 if segments else 0
            tokens += inputs_D[members[0]][:prefix]
            positions += range(prefix)
            segments += [prefix_segment] * prefix
            reads += [prefix_segment] * prefix
            for k, index in enumerate(members, start=1):
                suffix = inputs_D[index][prefix:]
                slots_D[index] = [*range(start, start + prefix), *range(len(tokens), len(tokens) + len(suffix))]
                tokens += suffix
                positions += range(prefix, prefix + len(suffix))
                segments += [prefix_segment + k] * len(suffix)
                reads += [prefix_segment] * len(suffix)
    width = max(len(tokens) for tokens in tokens_B)
    cpu = torch.device("cpu")
    segment_BW, reads_BW = right_pad(segments_B, -1, cpu), right_pad(reads_B, -1, cpu)
    key_B1W, slot_W = segment_BW[:, None, :], torch.arange(width)
    allowed = (slot_W[None, None, :] <= slot_W[None, :, None]) & (
        (key_B1W == segment_BW[:, :, None]) | (key_B1W == reads_BW[:, :, None])
    )
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
    offsets = {index: b * width for b, row in enumerate(rows) for _, members in row for index in members}
    slots_N = torch.tensor([offsets[d] + slot for d, slots in enumerate(slots_D) for slot in slots], dtype=torch.long)
    return PackedRows(
        right_pad(tokens_B, pad_id, device),
        right_pad(positions_B, 0, device),
        mask[:, None].to(device),
        slots_N.to(device),
        torch.cat([torch.arange(len(tokens)) + b * width for b, tokens in enumerate(tokens_B)]).to(device),
    )


MASKED_ATTENTION = ("eager", "sdpa")
"""Attention implementations that apply an arbitrary 4D float mask (flash attention and flex
attention take none, or their own form)."""


def takes_packed_mask(model: torch.nn.Module) -> bool:
    """Whether one 4D mask can stand for the model's own masks, so sequences may be packed: every
    layer attends to all earlier tokens (a 4D mask would override a sliding window, and linear
    attention ignores it) and the attention implementation applies such a mask."""
    config = getattr(model, "config", None)
    if config is None:
        return False
    text_config = config.get_text_config(decoder=True)
    if getattr(text_config, "_attn_implementation", None) not in MASKED_ATTENTION:
        return False
    layer_types = getattr(text_config, "layer_types", None)
    if layer_types is None:  # configs without per-layer types slide when they name a window
        return getattr(text_config, "sliding_window", None) is None
    return all(kind == "full_attention" for kind in layer_types)


@dataclass(frozen=True)
class ScoredSequences:
    """Each sequence's target logprobs [L_d] (and each target position's entropy [L_d], when asked
    for), and what the pass cost: the token slots that went through the model and how many of
    them held a token (a shared prefix counts once)."""

    logprobs_D: list[torch.Tensor]
    slots: int
    filled: int
    entropy_D: list[torch.Tensor] | None = None


def sequence_logprobs(
    model: torch.nn.Module,
    inputs_D: Sequence[Sequence[int]],
    targets_D: Sequence[Sequence[int]],
    pad_id: int,
    method: LogprobMethod = "chunked",
    entropy: Entropy = "none",
) -> ScoredSequences:
    """Logprob of each sequence's target tokens (target t given inputs[: t + 1]): [L_d] each, and,
    unless `entropy` is "none", the entropy of each of those next-token distributions. Sequences are packed
    (see the module docstring) where that pays and the model attends fully; otherwise they are
    right-padded, which needs no mask. Either way only real tokens reach the output head."""
    parameter = next(model.parameters())
    device = parameter.device
    lengths_D = [len(tokens) for tokens in inputs_D]
    packed = None
    unpadded = may_run_unpadded(model)
    if takes_packed_mask(model):
        packed = pack_sequences(inputs_D, pad_id, parameter.dtype, device, attention_break_even(model), unpadded)
    model_inputs: dict[str, torch.Tensor]
    if packed is None:
        input_ids_BL = right_pad(inputs_D, pad_id, device)
        width = input_ids_BL.shape[1]
        slots_N = torch.cat([torch.arange(length) + row * width for row, length in enumerate(lengths_D)]).to(device)
        model_inputs, slots, filled = {"input_ids": input_ids_BL}, input_ids_BL.numel(), sum(lengths_D)
    else:
        model_inputs = {
            "input_ids": packed.input_ids_BW,
            "position_ids": packed.position_ids_BW,
            "attention_mask": packed.attention_mask_B1WW,
        }
        slots_N, slots, filled = packed.slots_N, packed.input_ids_BW.numel(), packed.filled
    targets_N = torch.tensor([t for targets in targets_D for t in targets], dtype=torch.long, device=device)
    scores = None
    if packed is not None and packed.filled < slots and unpadded:
        if method != "full":
            output_head(model)  # its one-time check runs the model's own attention, so before the switch
        rows, width = packed.input_ids_BW.shape
        rank_S = torch.full((slots,), -1, dtype=torch.long, device=device)
        rank_S[packed.filled_N] = torch.arange(packed.filled, device=device)
        unpadded_N = rank_S[slots_N]  # the scored tokens' places among the real ones

        def score(inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
            return score_tokens(model, inputs, unpadded_N, targets_N, method, entropy)

        scores = run_unpadded(model, score, model_inputs, packed.filled_N, rows, width)
    logprobs_N, entropy_N = scores or score_tokens(model, model_inputs, slots_N, targets_N, method, entropy)
    entropy_D = None if entropy_N is None else list(entropy_N.split(lengths_D))
    return ScoredSequences(list(logprobs_N.split(lengths_D)), slots, filled, entropy_D)


def vocab_size(model: torch.nn.Module) -> int:
    """How many token ids the model's embedding accepts."""
    embedding = cast(Callable[[], torch.nn.Module], model.get_input_embeddings)()
    assert isinstance(embedding, torch.nn.Embedding)
    return embedding.num_embeddings
