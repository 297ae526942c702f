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

import functools
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from adapters.local.grouped_lora import AdapterGroups, bind
from adapters.local.mixed_precision import gradient_scale, is_low_precision, scale_gradient

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
    `logits / temperature`. Under float16's loss scaling the gradient flowing back into the
    logits is scaled here, where it leaves float32 (`adapters.local.mixed_precision`)."""
    if logits.dtype != torch.float64:
        logits = scale_gradient(logits.float())
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
    """`logits_scores(head(hidden_NH), ...)`, computed `chunk_tokens` rows at a time. A
    low-precision linear head goes through `LowPrecisionHead` (float32 logits, its weight's
    gradient summed in float32)."""
    weight = getattr(head, "weight", None)
    if isinstance(head, torch.nn.Linear) and isinstance(weight, torch.Tensor) and is_low_precision(weight.dtype):
        logprobs_N, entropy_N = LowPrecisionHead.apply(
            hidden_NH, head.weight, head.bias, targets_N, chunk_tokens, entropy, gradient_scale()
        )
        return logprobs_N, None if entropy == "none" else entropy_N
    recompute = torch.is_grad_enabled() and hidden_NH.shape[0] > chunk_tokens

    def score(hidden_cH: torch.Tensor, targets_c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _from_logprobs(log_softmax_f32(head(hidden_cH)), targets_c, entropy)

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


class LowPrecisionHead(torch.autograd.Function):
    """`chunked_scores` of a bfloat16/float16 linear head: float32 logits, and the weight's
    gradient summed in float32.

    The logits come out of the head's matmul in float32 (its products are exact, its sums float32:
    `linear_f32`), not rounded to the weights' dtype first, whose 8-bit mantissa would put errors
    of ~0.03 on logits of ~10: the logprobs, and so the losses, are those of the model's hidden
    states to float32 precision. Autograd would add each chunk's [V, H] weight gradient in the
    weight's dtype: over ~150 chunks (4k tokens of a 151,936-token vocabulary) bfloat16 loses a
    few percent of the sum, and for a tied head that sum is the embedding's gradient too. So the
    forward keeps no logits (only its inputs), and the backward recomputes each chunk's logits,
    forms d(loss)/d(logits) in float32 (softmax minus the target's one-hot, times the incoming
    gradient, plus the entropy's term when it is differentiated) and adds the chunk's weight
    gradient to a float32 sum; the hidden states' gradient is the chunk's own, in the model's
    dtype. Under float16's loss scaling `grad_scale` multiplies the gradient as it leaves
    float32, as `scale_gradient` does on the other paths."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden_NH: torch.Tensor,
        weight_VH: torch.Tensor,
        bias_V: torch.Tensor | None,
        targets_N: torch.Tensor,
        chunk_tokens: int,
        entropy: Entropy,
        grad_scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logprobs, entropies = [], []
        linear = linear_f32(weight_VH, bias_V)
        for start in range(0, hidden_NH.shape[0], chunk_tokens):
            end = start + chunk_tokens
            logprobs_cV = torch.log_softmax(linear(hidden_NH[start:end]), dim=-1)
            logprobs.append(logprobs_cV.gather(-1, targets_N[start:end, None]).squeeze(-1))
            if entropy != "none":
                entropies.append(-(logprobs_cV.exp() * logprobs_cV).sum(-1))
        empty = hidden_NH.new_zeros((0,), dtype=torch.float32)
        logprobs_N = torch.cat(logprobs) if logprobs else empty
        entropy_N = torch.cat(entropies) if entropies else empty
        ctx.save_for_backward(hidden_NH, weight_VH, bias_V, targets_N)
        ctx.chunk_tokens, ctx.entropy, ctx.grad_scale = chunk_tokens, entropy, grad_scale
        if entropy != "grad":
            ctx.mark_non_differentiable(entropy_N)
        return logprobs_N, entropy_N

    @staticmethod
    def backward(
        ctx: Any, grad_logprobs_N: torch.Tensor | None, grad_entropy_N: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        hidden_NH, weight_VH, bias_V, targets_N = ctx.saved_tensors
        grad_hidden_NH = torch.zeros_like(hidden_NH)
        grad_weight_VH = torch.zeros(weight_VH.shape, dtype=torch.float32, device=weight_VH.device)
        grad_bias_V = None if bias_V is None else torch.zeros(bias_V.shape, dtype=torch.float32, device=bias_V.device)
        grad_entropy = grad_entropy_N if ctx.entropy == "grad" else None
        linear = linear_f32(weight_VH, bias_V)
        for start in range(0, hidden_NH.shape[0], ctx.chunk_tokens):
            end = start + ctx.chunk_tokens
            hidden_cH = hidden_NH[start:end]
            logprobs_cV = torch.log_softmax(linear(hidden_cH), dim=-1)
            probs_cV = logprobs_cV.exp()
            grad_cV = torch.zeros_like(probs_cV)
            if grad_logprobs_N is not None:  # d logp_t / d z = onehot(t) - p
                grad_c = grad_logprobs_N[start:end].float()
                grad_cV = -probs_cV * grad_c[:, None]
                grad_cV.scatter_add_(-1, targets_N[start:end, None], grad_c[:, None])
            if grad_entropy is not None:  # d H / d z = -p (log p + H)
                entropy_c = -(probs_cV * logprobs_cV).sum(-1, keepdim=True)
                grad_cV -= grad_entropy[start:end, None].float() * probs_cV * (logprobs_cV + entropy_c)
            if ctx.grad_scale != 1.0:
                grad_cV *= ctx.grad_scale
            low_cV = grad_cV.to(weight_VH.dtype)
            grad_hidden_NH[start:end] = low_cV @ weight_VH
            # the low-precision values are exact in float32 (and in TF32): only the sum is wider
            grad_weight_VH.addmm_(low_cV.T.float(), hidden_cH.float())
            if grad_bias_V is not None:
                grad_bias_V += low_cV.float().sum(0)
        return grad_hidden_NH, grad_weight_VH, grad_bias_V, None, None, None, None


def linear_f32(weight_VH: torch.Tensor, bias_V: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
    """`hidden -> hidden @ weight.T + bias` with float32 output for low-precision operands: on CUDA
    a low-precision matmul that writes its float32 sums (`torch.mm(..., out_dtype=)`, where this
    torch has it), elsewhere a float32 matmul of the operands upcast once (their products are
    exact in float32, so both give the same logits up to summation order)."""
    bias32 = None if bias_V is None else bias_V.float()
    if weight_VH.device.type == "cuda" and _mm_writes_float32(weight_VH.device, weight_VH.dtype):
        weight_HV = weight_VH.T

        def low(hidden_cH: torch.Tensor) -> torch.Tensor:
            logits = torch.mm(hidden_cH, weight_HV, out_dtype=torch.float32)
            return logits if bias32 is None else logits + bias32

        return low
    weight32 = weight_VH.float()
    return lambda hidden_cH: F.linear(hidden_cH.float(), weight32, bias32)


@functools.cache
def _mm_writes_float32(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether `torch.mm(..., out_dtype=torch.float32)` runs for `dtype` operands on `device`
    (decided once per device, on 2 x 2 operands: it is a capability of this torch build)."""
    operand = torch.ones((2, 2), dtype=dtype, device=device)
    try:
        return torch.mm(operand, operand, out_dtype=torch.float32).dtype == torch.float32
    except (RuntimeError, TypeError, NotImplementedError):
        return False


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
    groups: AdapterGroups | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the model on `model_inputs` ([B, W] rows) and score the tokens at `slots_N` (positions in
    the flattened rows) against `targets_N`: their logprobs [N] in float32, and their entropy [N]
    unless `entropy` is "none" (else None). Pads are never scored: only the N slots reach the head.

    With `groups`, `model` is their host and the tokens are several LoRA clients' (`grouped_lora`):
    each position runs through its client's adapters (pads: the first client's), and each client's
    tokens through its own output head."""
    split = None if method == "full" else output_head(model)
    with _bound(model_inputs, slots_N, groups):
        if split is None:
            logits_BWV = model(**model_inputs, use_cache=False).logits
            return logits_scores(logits_BWV.flatten(0, 1).index_select(0, slots_N), targets_N, entropy)
        hidden_PH = split.body(**model_inputs, use_cache=False).last_hidden_state.flatten(0, 1)
    if groups is None:
        return _head_scores(split.head, hidden_PH, slots_N, targets_N, method, entropy)
    groups_N = groups.tokens(targets_N.device)
    parts, order = [], []
    for g, head in enumerate(groups.heads_G):
        chosen = (groups_N == g).nonzero().flatten()
        if chosen.numel():
            assert head is not None  # every client of a grouped pass has a checked output head
            parts.append(_head_scores(head, hidden_PH, slots_N[chosen], targets_N[chosen], method, entropy))
            order.append(chosen)
    back_N = torch.cat(order).argsort()
    logprobs_N = torch.cat([part[0] for part in parts])[back_N]
    if entropy == "none":
        return logprobs_N, None
    return logprobs_N, torch.cat([cast(torch.Tensor, part[1]) for part in parts])[back_N]


@contextmanager
def _bound(
    model_inputs: Mapping[str, torch.Tensor], slots_N: torch.Tensor, groups: AdapterGroups | None
) -> Iterator[None]:
    """The groups' adapters bound to the positions of `model_inputs` (nothing without groups):
    every scored slot is its sequence's client's, the pads the first client's."""
    if groups is None:
        yield
        return
    groups_P = slots_N.new_zeros(model_inputs["input_ids"].numel())
    groups_P[slots_N] = groups.tokens(slots_N.device)
    with bind(groups.host, groups.adapters_G, groups_P):
        yield


def _head_scores(
    head: torch.nn.Module,
    hidden_PH: torch.Tensor,
    slots_N: torch.Tensor,
    targets_N: torch.Tensor,
    method: LogprobMethod,
    entropy: Entropy,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The targets' scores from the hidden states at `slots_N`, through `head`."""
    distinct = distinct_pairs(slots_N, targets_N)
    if distinct is not None:
        slots_N, targets_N, inverse_N = distinct
    hidden_NH = hidden_PH.index_select(0, slots_N)
    if method == "liger" and entropy == "none" and isinstance(head, torch.nn.Linear):
        scores: tuple[torch.Tensor, torch.Tensor | None] = liger_scores(head, hidden_NH, targets_N), None
    else:
        scores = chunked_scores(head, hidden_NH, targets_N, entropy, chunk_tokens_for(_vocab(head)))
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
