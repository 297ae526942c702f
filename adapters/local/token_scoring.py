"""Target-token logprobs (and entropy) from a model's final hidden states, a chunk of tokens at a time.

The logits of N tokens over a V-token vocabulary are N x V floats: at 4 x 1024 tokens over Qwen's
151,936 ids, 2.5 GB in float32, and as much again for `log_softmax`'s output and for each gradient
of the backward pass. Here the body runs once; the output head, softmax, gather and entropy then
run on at most `chunk_tokens` tokens at a time, so no more than one chunk's [chunk, V] tensors
exist at once. With gradients, each chunk is checkpointed (its logits are recomputed in the
backward pass instead of kept): one more head matmul, which only happens when there is more than
one chunk. Values and gradients are those of the whole-logits computation, up to float rounding.

A model's logits are `head(body(...).last_hidden_state)` for most causal LMs, but some transform
them (Gemma's soft-capping, Cohere's and Granite's scaling): `output_head` checks the split
against the model's own forward on a few tokens, once per model, and models that fail it are
scored from their whole logits (`method="full"` does that for any model), as are FSDP-sharded
models (their root's hooks run only through the whole forward).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, cast

import torch
from torch.utils.checkpoint import checkpoint

LogprobMethod = Literal["chunked", "full", "liger"]
"""How token logprobs come from the final hidden states: `chunked` (this module's loop, any device),
`full` (the model's whole logits at once, the reference), `liger` (Liger's fused linear
cross-entropy on CUDA, where it computes the same thing: a plain linear head and no entropy)."""

LOGITS_BUDGET = 2**25
"""Floats in one chunk's logits (128 MiB in float32): about 220 tokens over a 151,936-token
vocabulary, the whole batch for small vocabularies (then nothing is recomputed)."""


def chunk_tokens_for(vocab: int) -> int:
    """Tokens per chunk so that one chunk's logits stay within LOGITS_BUDGET floats."""
    return max(1, LOGITS_BUDGET // vocab)


def log_softmax_f32(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-probabilities over the last axis, in float32 (float64 for a float64 model), of
    `logits / temperature`."""
    if logits.dtype != torch.float64:
        logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1)


Entropy = Literal["none", "value", "grad"]
"""Whether to compute each scored token's entropy, and whether gradients flow through it (an
entropy bonus in the loss) or it is a value only (a metric: nothing of it is kept for backward)."""


def _from_logprobs(logprobs_NV: torch.Tensor, targets_N: torch.Tensor, entropy: Entropy) -> tuple[torch.Tensor, ...]:
    """The targets' logprobs [N] and, unless `entropy` is "none", each token's entropy -sum(p log p) [N]."""
    chosen_N = logprobs_NV.gather(-1, targets_N.unsqueeze(-1)).squeeze(-1)
    if entropy == "none":
        return (chosen_N,)
    with torch.set_grad_enabled(entropy == "grad" and torch.is_grad_enabled()):
        return chosen_N, -(logprobs_NV.exp() * logprobs_NV).sum(-1)


def logits_scores(
    logits_NV: torch.Tensor, targets_N: torch.Tensor, entropy: Entropy
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Target logprobs [N] (and entropy [N], or None) from whole logits: the reference computation."""
    scores = _from_logprobs(log_softmax_f32(logits_NV), targets_N, entropy)
    return scores[0], scores[1] if entropy != "none" else None


def chunked_scores(
    head: torch.nn.Module,
    hidden_NH: torch.Tensor,
    targets_N: torch.Tensor,
    entropy: Entropy,
    chunk_tokens: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`logits_scores(head(hidden_NH), ...)`, computed `chunk_tokens` rows at a time."""

    def score(hidden_cH: torch.Tensor, targets_c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _from_logprobs(log_softmax_f32(head(hidden_cH)), targets_c, entropy)

    recompute = torch.is_grad_enabled() and hidden_NH.shape[0] > chunk_tokens
    parts = []
    for start in range(0, hidden_NH.shape[0], chunk_tokens):
        hidden_cH, targets_c = hidden_NH[start : start + chunk_tokens], targets_N[start : start + chunk_tokens]
        if recompute:
            parts.append(cast(tuple[torch.Tensor, ...], checkpoint(score, hidden_cH, targets_c, use_reentrant=False)))
        else:
            parts.append(score(hidden_cH, targets_c))
    if not parts:  # no tokens
        empty = hidden_NH.new_zeros((0,), dtype=torch.float32)
        return empty, None if entropy == "none" else empty
    logprobs_N = torch.cat([part[0] for part in parts])
    return logprobs_N, None if entropy == "none" else torch.cat([part[1] for part in parts])


def liger_scores(head: torch.nn.Module, hidden_NH: torch.Tensor, targets_N: torch.Tensor) -> torch.Tensor:
    """Target logprobs by Liger's fused linear cross-entropy (CUDA only; per-token losses with
    per-token gradients need liger-kernel >= 0.8.5). Not run in this project's tests: they have
    no GPU."""
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    assert isinstance(head, torch.nn.Linear)
    losses_N = liger_fused_linear_cross_entropy(hidden_NH, head.weight, targets_N, head.bias, reduction="none")
    return -cast(torch.Tensor, losses_N).float()


def liger_available() -> bool:
    """Whether Liger's kernels can run here: a CUDA device and the liger-kernel package."""
    if not torch.cuda.is_available():
        return False
    try:
        import liger_kernel.transformers.functional  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class OutputHead:
    """A causal LM split into its body (token ids to final hidden states) and its output head."""

    body: torch.nn.Module
    head: torch.nn.Module


_SPLITS: weakref.WeakKeyDictionary[torch.nn.Module, OutputHead | None] = weakref.WeakKeyDictionary()
SPLIT_CHECK_TOKENS = 8


@contextmanager
def _eval_mode(model: torch.nn.Module) -> Iterator[None]:
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


def output_head(model: torch.nn.Module) -> OutputHead | None:
    """The model's body and head when its logits are exactly `head(body(...).last_hidden_state)`,
    checked once per model on a few tokens (in eval mode, without gradients); else None."""
    if model in _SPLITS:
        return _SPLITS[model]
    split = None
    if _sharded(model):  # calling the body alone would skip the root's unshard and gradient hooks
        _SPLITS[model] = None
        return None
    get_decoder = getattr(model, "get_decoder", None)
    get_head = getattr(model, "get_output_embeddings", None)
    body = get_decoder() if callable(get_decoder) else None
    head = get_head() if callable(get_head) else None
    if isinstance(body, torch.nn.Module) and isinstance(head, torch.nn.Module):
        device = next(model.parameters()).device
        ids_1T = torch.arange(SPLIT_CHECK_TOKENS, device=device)[None] % _vocab(head)
        with torch.no_grad(), _eval_mode(model):
            whole = model(input_ids=ids_1T, use_cache=False).logits.float()
            parts = head(body(input_ids=ids_1T, use_cache=False).last_hidden_state).float()
        if whole.shape == parts.shape and (whole - parts).abs().max() <= 1e-6 * (1 + whole.abs().max()):
            split = OutputHead(body, head)
    _SPLITS[model] = split
    return split


def _sharded(model: torch.nn.Module) -> bool:
    if not torch.distributed.is_available():
        return False
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _vocab(head: torch.nn.Module) -> int:
    out_features = getattr(head, "out_features", None)
    if isinstance(out_features, int):
        return out_features
    weight = getattr(head, "weight", None)
    return int(weight.shape[0]) if isinstance(weight, torch.Tensor) else SPLIT_CHECK_TOKENS


def score_tokens(
    model: torch.nn.Module,
    model_inputs: Mapping[str, torch.Tensor],
    slots_N: torch.Tensor,
    targets_N: torch.Tensor,
    method: LogprobMethod = "chunked",
    entropy: Entropy = "none",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the model on `model_inputs` ([B, W] rows) and score the tokens at `slots_N` (positions in
    the flattened rows) against `targets_N`: their logprobs [N] in float32, and their entropy [N]
    unless `entropy` is "none" (else None). Pads are never scored: only the N slots reach the head."""
    split = None if method == "full" else output_head(model)
    if split is None:
        logits_BWV = model(**model_inputs, use_cache=False).logits
        return logits_scores(logits_BWV.flatten(0, 1).index_select(0, slots_N), targets_N, entropy)
    hidden_BWH = split.body(**model_inputs, use_cache=False).last_hidden_state
    distinct = distinct_pairs(slots_N, targets_N)
    if distinct is not None:
        slots_N, targets_N, inverse_N = distinct
    hidden_NH = hidden_BWH.flatten(0, 1).index_select(0, slots_N)
    if method == "liger" and entropy == "none" and isinstance(split.head, torch.nn.Linear):
        scores: tuple[torch.Tensor, torch.Tensor | None] = liger_scores(split.head, hidden_NH, targets_N), None
    else:
        scores = chunked_scores(split.head, hidden_NH, targets_N, entropy, chunk_tokens_for(_vocab(split.head)))
    if distinct is None:
        return scores
    logprobs_U, entropy_U = scores
    return logprobs_U[inverse_N], None if entropy_U is None else entropy_U[inverse_N]


def distinct_pairs(
    slots_N: torch.Tensor, targets_N: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """The distinct (slot, target) pairs among the N to score, and for each of the N its place
    among them; None when all N are distinct. Packed sequences that share a prefix read their
    shared tokens' hidden states from the same slots, with the same targets: those need the head,
    softmax and gather once (over a 151,936-token vocabulary the head is a quarter of a 0.6B
    model's work per token). Indexing sums the copies' gradients onto the one row, as the copies'
    own rows would have had them summed in the shared slot."""
    if slots_N.numel() < 2:
        return None
    base = int(targets_N.max()) + 1  # every target below it, so no two pairs share a key
    distinct_U, inverse_N = torch.unique(slots_N * base + targets_N, return_inverse=True)
    if distinct_U.numel() == slots_N.numel():
        return None
    return distinct_U // base, distinct_U % base, inverse_N
