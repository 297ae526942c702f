"""The one way the local backend turns logits into logprobs.

Training, `compute_logprobs` and sampling all go through `log_softmax_f32`, in float32, on a model
that is always in eval mode; that shared path is what makes their logprobs agree on the same
weights (so `kl_sample_train` is ~0 on-policy). Training and scoring take the logprobs from the
final hidden states a chunk of tokens at a time (`adapters.local.token_scoring`), never from the
whole [tokens, vocab] logits.

Training and `compute_logprobs` score whole batches of sequences (`sequence_logprobs`) packed
into rows: sequences that start alike form a prefix tree whose shared parts run once (a DPO
pair's prompt and the first words its two replies share, a group of RL samples of one prompt, the
chat template and wording many prompts begin with), and short sequences share a row instead of
padding to the longest. An attention mask lets each segment of a tree see only itself and its
ancestors, and position ids go on where the parent segment ends, so each sequence computes what
it would alone (within float rounding), on fewer tokens. Where attention runs over each sequence
alone instead (`attend_alone`: `adapters.local.unpadded_rows`), no row is ever attended over, so
trees are not bounded: the batch's whole prefix trie runs, every shared start once. The output
head, too, scores each distinct (slot, target) pair once (`token_scoring.distinct_pairs`). On
CUDA that trie runs as one row under FlexAttention instead (`trie_row`, `unpadded_rows.TrieLayout`).

In bfloat16 and float16 the scoring head writes float32 logits (`token_scoring.LowPrecisionHead`)
while the sampler's decoding takes the model's own, rounded to its dtype: the two agree to that
rounding (as they agree only to the kernels' rounding at any low precision).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch

from adapters.common.training_batch import right_pad, row_slots
from adapters.local.grouped_lora import AdapterGroups
from adapters.local.mixed_precision import compute_dtype
from adapters.local.token_scoring import Entropy, LogprobMethod, log_softmax_f32, output_head, score_tokens
from adapters.local.unpadded_rows import attention_route, may_run_unpadded, run_trie, run_unpadded
from kitchen.engine.ports import Tokenizer

MIN_SHARED_PREFIX = 4
"""A sequence joins a prefix tree only when it starts with at least this many of its tokens (fewer
would widen the row for almost no saving)."""
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


MAX_PACKED_WIDTH = 1024
"""Rows grow past the largest prefix tree (to fit more trees per row) only up to this many tokens:
the attention mask is [rows, width, width]."""


@dataclass
class PrefixTree:
    """Sequences that share leading tokens, as a tree of segments: each segment continues its
    parent's tokens (the root's parent is -1) from position `starts[segment]`, and a sequence is the
    path from the root to its last segment (`ends`). Tokens shared by several sequences are in the
    tree once: a DPO pair's prompt and the common start of its two replies, the prompt of a group
    of RL samples, and the template and wording several prompts begin with."""

    tokens: list[list[int]]
    parents: list[int]
    starts: list[int]
    ends: dict[int, int]
    """Each sequence's (its index in the batch) last segment."""

    @classmethod
    def of(cls, index: int, tokens: Sequence[int]) -> PrefixTree:
        return cls([list(tokens)], [-1], [0], {index: 0})

    @property
    def size(self) -> int:
        """Its tokens: the slots it takes in a row."""
        return sum(map(len, self.tokens))

    def path(self, index: int) -> list[int]:
        """The segments of sequence `index`, root first."""
        segments = [self.ends[index]]
        while self.parents[segments[-1]] >= 0:
            segments.append(self.parents[segments[-1]])
        return segments[::-1]

    def add(self, index: int, tokens: Sequence[int], shared: int, beside: int) -> None:
        """Add sequence `index`, whose first `shared` (> 0) tokens are those of sequence `beside`:
        the segment holding its last shared token is split there if it goes on, and the rest of
        `tokens` becomes a new segment under it."""
        segment = self.ends[beside]
        while self.starts[segment] >= shared:
            segment = self.parents[segment]
        cut = shared - self.starts[segment]
        if cut < len(self.tokens[segment]):  # split: the upper part becomes the parent
            self.tokens.append(self.tokens[segment][:cut])
            self.parents.append(self.parents[segment])
            self.starts.append(self.starts[segment])
            self.tokens[segment] = self.tokens[segment][cut:]
            self.parents[segment], self.starts[segment] = len(self.tokens) - 1, shared
            segment = len(self.tokens) - 1
        if shared == len(tokens):  # a repeated sequence ends where the shared part does
            self.ends[index] = segment
            return
        self.tokens.append(list(tokens[shared:]))
        self.parents.append(segment)
        self.starts.append(shared)
        self.ends[index] = len(self.tokens) - 1


def _shared_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` have in common."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


TREE_ATTENTION_SHARE = 0.05
"""A prefix tree may grow past twice the longest sequence while a token's attention over a row as
wide as the tree costs at most this share of its matmuls (see `attention_break_even`)."""


def prefix_trees(
    inputs_D: Sequence[Sequence[int]],
    attention_tokens: float | None = None,
    unbounded: bool = False,
    groups_D: Sequence[int] | None = None,
) -> list[PrefixTree]:
    """The sequences as prefix trees: sorting brings sequences with a common start next to each
    other (each shares the most with the one before it); one joins the tree before it when they
    share at least MIN_SHARED_PREFIX tokens and the tree stays within twice the longest sequence, or
    within the width where attention costs TREE_ATTENTION_SHARE of the matmuls when that is wider
    (a row's attention grows with its width, so one shared system prompt must not fold a whole
    batch into one row). `unbounded`: a shared first token is enough and trees grow without limit
    (the batch's whole prefix trie), for attention that never sees the rows (`attend_alone`).
    With `groups_D` (each sequence's LoRA client in a grouped pass, `grouped_lora`), sequences of
    different clients never share a tree: their tokens run through different adapters."""
    group_D = groups_D if groups_D is not None else [0] * len(inputs_D)
    limit = 2 * max(len(tokens) for tokens in inputs_D)
    if attention_tokens is not None:
        limit = max(limit, min(MAX_PACKED_WIDTH, int(TREE_ATTENTION_SHARE * attention_tokens)))
    least = 1 if unbounded else MIN_SHARED_PREFIX
    trees: list[PrefixTree] = []
    previous = -1
    for index in sorted(range(len(inputs_D)), key=lambda i: (group_D[i], tuple(inputs_D[i]))):
        tokens = inputs_D[index]
        same_group = bool(trees) and group_D[previous] == group_D[index]
        shared = _shared_length(inputs_D[previous], tokens) if same_group else 0
        if shared >= least and (unbounded or trees[-1].size + len(tokens) - shared <= limit):
            trees[-1].add(index, tokens, shared, previous)
        else:
            trees.append(PrefixTree.of(index, tokens))
        previous = index
    return trees


def _first_fit(lengths: Sequence[int], width: int) -> list[list[int]]:
    """Tree indices laid into rows of `width` slots, first-fit by decreasing size."""
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
    inputs_D: Sequence[Sequence[int]],
    attention_tokens: float | None = None,
    unpadded: bool = False,
    groups_D: Sequence[int] | None = None,
) -> list[list[PrefixTree]]:
    """`prefix_trees` laid into rows, first-fit by decreasing size: short sequences fill the room
    that padding would otherwise take. Rows are as wide as the largest tree, or, given
    `attention_tokens` (the row width at which a token's attention costs as much as its matmuls:
    `attention_break_even`), as wide as costs least: fewer, wider rows waste fewer slots on padding,
    but every slot attends to the whole row (at most MAX_PACKED_WIDTH). Rows that run `unpadded`
    waste nothing on padding but attention, so they stay narrow."""
    trees = prefix_trees(inputs_D, attention_tokens, groups_D=groups_D)
    sizes = [tree.size for tree in trees]
    largest = max(sizes)
    best = _first_fit(sizes, largest)
    if attention_tokens is not None:
        total = sum(sizes)
        widths = {-(-total // count) for count in range(1, len(sizes) + 1)}
        for width in sorted(w for w in widths if largest < w <= MAX_PACKED_WIDTH):
            rows = _first_fit(sizes, width)
            if _row_cost(sizes, rows, attention_tokens, unpadded) < _row_cost(sizes, best, attention_tokens, unpadded):
                best = rows
    return [[trees[t] for t in row] for row in best]


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
    attention_mask_B1WW: torch.Tensor | None
    """None when attention runs over each sequence alone (`alone`): the rows are then one row of
    every tree, which no attention sees."""
    slots_N: torch.Tensor
    filled_N: torch.Tensor
    """The slots that hold a token, in order (the rest are padding)."""

    @property
    def filled(self) -> int:
        """How many of the rows' slots hold a token."""
        return int(self.filled_N.numel())

    @property
    def alone(self) -> bool:
        return self.attention_mask_B1WW is None


def pack_sequences(
    inputs_D: Sequence[Sequence[int]],
    pad_id: int,
    dtype: torch.dtype,
    device: torch.device,
    attention_tokens: float | None = None,
    unpadded: bool = False,
    groups_D: Sequence[int] | None = None,
) -> PackedRows | None:
    """Pack the sequences by `pack_rows` (`attention_tokens`, `unpadded`: its row-width trade-off),
    or None when that saves less than MIN_PACKING_SAVING of the token slots of plain right padding
    (the slots the matmuls see: the rows', or the real tokens when the rows run `unpadded`). Rows
    that run unpadded with attention over each sequence alone (`attend_alone`) hold the batch's
    whole prefix trie in one row, with no mask: only the layers outside attention see them.

    Every slot belongs to a segment of a prefix tree; a query attends to the earlier slots of its
    own segment and of the segment's ancestors, and positions go on from where the parent segment
    ends. The additive float mask (0 where a query may attend, the dtype's minimum elsewhere) works
    for every attention implementation that takes a 4D mask; pad slots form one segment, so no
    softmax row is empty (an empty one would be NaN, and NaN reaches the gradients)."""
    rows = pack_rows(inputs_D, attention_tokens, unpadded, groups_D)
    row_lengths = [sum(tree.size for tree in row) for row in rows]
    alone = unpadded and attend_alone(list(map(len, inputs_D)), len(rows), max(row_lengths))
    if alone:
        rows = [prefix_trees(inputs_D, unbounded=True, groups_D=groups_D)]
        row_lengths = [sum(tree.size for tree in rows[0])]
    work = sum(row_lengths) if unpadded else len(rows) * max(row_lengths)
    if work > (1 - MIN_PACKING_SAVING) * len(inputs_D) * max(map(len, inputs_D)):
        return None
    tokens_B: list[list[int]] = [[] for _ in rows]
    positions_B: list[list[int]] = [[] for _ in rows]
    segments_B: list[list[int]] = [[] for _ in rows]
    ancestors_S: list[list[int]] = []  # every segment of the batch: itself and its ancestors
    slots_D: list[list[int]] = [[] for _ in inputs_D]
    for b, row in enumerate(rows):
        tokens, positions, segments = tokens_B[b], positions_B[b], segments_B[b]
        for tree in row:
            first = len(ancestors_S)  # the batch-wide number of the tree's segment 0
            slot = [0] * len(tree.tokens)  # each segment's first slot in the row
            ancestors_S += [[] for _ in tree.tokens]
            for k in sorted(range(len(tree.tokens)), key=lambda k: tree.starts[k]):  # parents first
                parent = tree.parents[k]
                ancestors_S[first + k] = [first + k, *(ancestors_S[first + parent] if parent >= 0 else [])]
                slot[k] = len(tokens)
                tokens += tree.tokens[k]
                positions += range(tree.starts[k], tree.starts[k] + len(tree.tokens[k]))
                segments += [first + k] * len(tree.tokens[k])
            for index in tree.ends:
                slots_D[index] = [s for k in tree.path(index) for s in range(slot[k], slot[k] + len(tree.tokens[k]))]
    width = max(len(tokens) for tokens in tokens_B)
    offsets = {index: b * width for b, row in enumerate(rows) for tree in row for index in tree.ends}
    slots_N = torch.tensor([offsets[d] + slot for d, slots in enumerate(slots_D) for slot in slots], dtype=torch.long)
    ids_BW, positions_BW = right_pad(tokens_B, pad_id, device), right_pad(positions_B, 0, device)
    filled_N = row_slots(list(map(len, tokens_B)), width, device)
    if alone:
        return PackedRows(ids_BW, positions_BW, None, slots_N.to(device), filled_N)
    pad_segment = len(ancestors_S)
    reads_SS = torch.zeros((pad_segment + 1, pad_segment + 1), dtype=torch.bool)  # [query, key]
    for segment, ancestors in enumerate(ancestors_S):
        reads_SS[segment, ancestors] = True
    reads_SS[pad_segment, pad_segment] = True
    segment_BW, slot_W = right_pad(segments_B, pad_segment, torch.device("cpu")), torch.arange(width)
    allowed = (slot_W[None, None, :] <= slot_W[None, :, None]) & reads_SS[
        segment_BW[:, :, None], segment_BW[:, None, :]
    ]
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
    return PackedRows(ids_BW, positions_BW, mask[:, None].to(device), slots_N.to(device), filled_N)


@dataclass(frozen=True)
class TrieRow:
    """The batch's whole prefix trie as one row, each tree depth-first (a segment, then the subtrees
    of its children), for `unpadded_rows.TrieLayout`: every shared start runs once, nothing pads."""

    input_ids_N: torch.Tensor
    position_ids_N: torch.Tensor
    subtree_end_N: torch.Tensor
    """For each slot, where the subtree of its segment ends (exclusive): the slots from it up to
    there (its segment's later tokens and the descendants') are the queries that may read it."""
    slots_N: torch.Tensor
    """Each sequence's slots, concatenated in order."""


def trie_row(inputs_D: Sequence[Sequence[int]], device: torch.device, groups_D: Sequence[int] | None = None) -> TrieRow:
    """Lay `prefix_trees(unbounded=True)` out depth-first in one row: built on the cpu from Python
    lists (no [N, N] mask: FlexAttention reads `subtree_end_N`), copied to a GPU from pinned memory
    without waiting."""
    tokens: list[int] = []
    positions: list[int] = []
    subtree_end: list[int] = []
    slots_D: list[list[int]] = [[] for _ in inputs_D]
    for tree in prefix_trees(inputs_D, unbounded=True, groups_D=groups_D):
        children: list[list[int]] = [[] for _ in tree.tokens]
        for segment, parent in enumerate(tree.parents):
            if parent >= 0:
                children[parent].append(segment)
        order, stack = [], [tree.parents.index(-1)]
        while stack:  # depth-first preorder
            segment = stack.pop()
            order.append(segment)
            stack.extend(reversed(children[segment]))
        size = [len(segment_tokens) for segment_tokens in tree.tokens]
        for segment in reversed(order):  # children come after their parent in the preorder
            size[segment] += sum(size[child] for child in children[segment])
        first = [0] * len(tree.tokens)
        for segment in order:
            first[segment] = len(tokens)
            tokens += tree.tokens[segment]
            positions += range(tree.starts[segment], tree.starts[segment] + len(tree.tokens[segment]))
            subtree_end += [first[segment] + size[segment]] * len(tree.tokens[segment])
        for index in tree.ends:
            slots_D[index] = [
                slot for k in tree.path(index) for slot in range(first[k], first[k] + len(tree.tokens[k]))
            ]

    def tensor(values: list[int]) -> torch.Tensor:
        host = torch.tensor(values, dtype=torch.long)
        return host.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else host

    return TrieRow(tensor(tokens), tensor(positions), tensor(subtree_end), tensor([s for d in slots_D for s in d]))


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


def attend_alone(lengths_D: Sequence[int], rows: int, width: int) -> bool:
    """Whether unpadded layers should run attention over each sequence alone rather than over the
    packed rows: it repeats the shared tokens' queries but needs no mask, and pays when its
    [D, L, L] scores are no more than the rows' [rows, width, width] (a DPO batch of
    polite_arithmetic: 32 x 35^2 against ~5 x 145^2)."""
    return len(lengths_D) * max(lengths_D) ** 2 <= rows * width**2


def check_scoring_paths(model: torch.nn.Module, method: LogprobMethod) -> None:
    """Run the once-per-model checks of the scoring paths now rather than inside a first pass:
    whether logprobs may come from the hidden states (`output_head`), and whether packed rows
    may skip their padding (`may_run_unpadded`'s probe). A training client calls this when it is
    made, so the workers of a sharded model all run the checks' forward passes at the same point."""
    if method != "full":
        output_head(model)
    if takes_packed_mask(model):
        may_run_unpadded(model)


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
    groups: AdapterGroups | None = None,
) -> ScoredSequences:
    """Logprob of each sequence's target tokens (target t given inputs[: t + 1]): [L_d] each, and,
    unless `entropy` is "none", the entropy of each of those next-token distributions. Sequences are packed
    (see the module docstring) where that pays and the model attends fully; otherwise they are
    right-padded, which needs no mask. Either way only real tokens reach the output head.

    With `groups`, `model` is their host and the sequences are several LoRA clients'
    (`adapters.local.grouped_lora`): no prefix is shared across clients, and each token runs
    through its own client's adapters and output head."""
    groups_D = None if groups is None else groups.groups_D
    device = next(model.parameters()).device
    lengths_D = [len(tokens) for tokens in inputs_D]
    targets_N = torch.tensor([t for targets in targets_D for t in targets], dtype=torch.long, device=device)
    packed = None
    if takes_packed_mask(model):
        attention_tokens, unpadded = attention_break_even(model), may_run_unpadded(model)
        if unpadded and attention_route(model) == "flex":
            if method != "full":
                output_head(model)  # its one-time check runs the model's own attention: before the switch
            row = trie_row(inputs_D, device, groups_D)

            def score(inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
                return score_tokens(model, inputs, row.slots_N, targets_N, method, entropy, groups)

            scores = run_trie(model, score, row.input_ids_N, row.position_ids_N, row.subtree_end_N)
            return _scored(scores, lengths_D, row.input_ids_N.numel(), row.input_ids_N.numel())
        packed = pack_sequences(inputs_D, pad_id, compute_dtype(model), device, attention_tokens, unpadded, groups_D)
        if packed is not None and unpadded:
            scores = _score_unpadded(model, packed, lengths_D, targets_N, method, entropy, groups)
            return _scored(scores, lengths_D, packed.input_ids_BW.numel(), packed.filled)
    if packed is None:
        input_ids_BL = right_pad(inputs_D, pad_id, device)
        slots_N = row_slots(lengths_D, input_ids_BL.shape[1], device)
        scores = score_tokens(model, {"input_ids": input_ids_BL}, slots_N, targets_N, method, entropy, groups)
        return _scored(scores, lengths_D, input_ids_BL.numel(), sum(lengths_D))
    assert packed.attention_mask_B1WW is not None  # packed for masked rows
    model_inputs = {
        "input_ids": packed.input_ids_BW,
        "position_ids": packed.position_ids_BW,
        "attention_mask": packed.attention_mask_B1WW,
    }
    scores = score_tokens(model, model_inputs, packed.slots_N, targets_N, method, entropy, groups)
    return _scored(scores, lengths_D, packed.input_ids_BW.numel(), packed.filled)


@torch.no_grad()
def log_sum_squared_probs(model: torch.nn.Module, inputs_D: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """Each input position's `log sum_v p_v^2` [L_d] (the next-token distribution's collision
    probability, for WPO's weights), in float32 through `log_softmax_f32`: a separate pass without
    gradients, one sequence at a time so its whole logits stay [L_d, V]. Only the losses that ask
    for it pay this second forward."""
    device = next(model.parameters()).device
    sums_D = []
    for tokens in inputs_D:
        logits_LV = model(input_ids=torch.tensor([list(tokens)], device=device), use_cache=False).logits[0]
        sums_D.append(torch.logsumexp(2.0 * log_softmax_f32(logits_LV), dim=-1))
    return sums_D


def _score_unpadded(
    model: torch.nn.Module,
    packed: PackedRows,
    lengths_D: list[int],
    targets_N: torch.Tensor,
    method: LogprobMethod,
    entropy: Entropy,
    groups: AdapterGroups | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`score_tokens` on the real tokens of the packed rows (`run_unpadded`)."""
    if method != "full":
        output_head(model)  # its one-time check runs the model's own attention, so before the switch
    slots = packed.input_ids_BW.numel()
    rank_S = torch.full((slots,), -1, dtype=torch.long, device=targets_N.device)
    rank_S[packed.filled_N] = torch.arange(packed.filled, device=targets_N.device)
    unpadded_N = rank_S[packed.slots_N]  # the scored tokens' places among the real ones

    def score(inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
        return score_tokens(model, inputs, unpadded_N, targets_N, method, entropy, groups)

    model_inputs = {"input_ids": packed.input_ids_BW, "position_ids": packed.position_ids_BW}
    if packed.attention_mask_B1WW is not None:
        model_inputs["attention_mask"] = packed.attention_mask_B1WW
    return run_unpadded(model, score, model_inputs, packed.filled_N, (unpadded_N, lengths_D) if packed.alone else None)


def _scored(
    scores: tuple[torch.Tensor, torch.Tensor | None], lengths_D: list[int], slots: int, filled: int
) -> ScoredSequences:
    logprobs_N, entropy_N = scores
    entropy_D = None if entropy_N is None else list(entropy_N.split(lengths_D))
    return ScoredSequences(list(logprobs_N.split(lengths_D)), slots, filled, entropy_D)


def vocab_size(model: torch.nn.Module) -> int:
    """How many token ids the model's embedding accepts."""
    embedding = cast(Callable[[], torch.nn.Module], model.get_input_embeddings)()
    assert isinstance(embedding, torch.nn.Embedding)
    return embedding.num_embeddings
