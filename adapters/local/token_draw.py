"""Drawing the next token of every row from its logits: temperature, top-k / top-p truncation,
and inverse-CDF sampling at a given uniform per row (so a seed fixes the draw whatever the batch);
greedy at temperature 0. The kitchen sampler and the image sampler both draw here."""

from __future__ import annotations

import torch

from adapters.local.token_scoring import log_softmax_f32
from train_core.types import SamplingParams


def truncate_logprobs(logprobs_NV: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set tokens outside the top-k and outside the top-p nucleus to -inf (the most likely stays)."""
    if top_k > 0 and top_k < logprobs_NV.shape[-1]:
        kth_best_N1 = torch.topk(logprobs_NV, top_k, dim=-1).values[..., -1:]
        logprobs_NV = logprobs_NV.masked_fill(logprobs_NV < kth_best_N1, float("-inf"))
    if top_p < 1.0:
        sorted_NV, order_NV = torch.sort(logprobs_NV, dim=-1, descending=True)
        probs_before_NV = torch.cumsum(sorted_NV.exp(), dim=-1) - sorted_NV.exp()
        drop_sorted_NV = probs_before_NV >= top_p  # the mass of better tokens already covers top_p
        drop_NV = torch.zeros_like(drop_sorted_NV).scatter(-1, order_NV, drop_sorted_NV)
        logprobs_NV = logprobs_NV.masked_fill(drop_NV, float("-inf"))
    return logprobs_NV


def top_logprobs(logprobs_BV: torch.Tensor, k: int) -> list[list[tuple[int, float]]]:
    """Each row's k most likely tokens and their logprobs, most likely first."""
    values_BK, ids_BK = torch.topk(logprobs_BV, min(k, logprobs_BV.shape[-1]), dim=-1)
    return [
        list(zip(ids, values, strict=True)) for ids, values in zip(ids_BK.tolist(), values_BK.tolist(), strict=True)
    ]


def next_tokens(
    logits_BV: torch.Tensor, params: SamplingParams, uniforms_B: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw one token per row by inverting its CDF at the row's uniform; return the tokens [B],
    their (pre-truncation) logprobs [B] and the whole distribution they were drawn from [B, V]
    (its logprobs). Greedy at temperature 0 (the uniforms are then unused)."""
    if params.temperature == 0.0 or uniforms_B is None:
        logprobs_BV = log_softmax_f32(logits_BV)
        tokens_B = logprobs_BV.argmax(dim=-1)
    else:
        logprobs_BV = log_softmax_f32(logits_BV, params.temperature)
        probs_BV = truncate_logprobs(logprobs_BV, params.top_k, params.top_p).exp()
        cdf_BV = probs_BV.cumsum(dim=-1)
        # The first token whose cumulative mass exceeds u * total: a token of zero probability
        # never qualifies (its cdf equals its predecessor's). Rounding can push u * total to the
        # total itself; those rows take the most likely token.
        threshold_B1 = uniforms_B.unsqueeze(-1) * cdf_BV[:, -1:]
        tokens_B = torch.searchsorted(cdf_BV, threshold_B1, right=True).squeeze(-1)
        overflow_B = tokens_B >= cdf_BV.shape[-1]
        if bool(overflow_B.any()):
            tokens_B = torch.where(overflow_B, probs_BV.argmax(dim=-1), tokens_B)
    return tokens_B, logprobs_BV.gather(-1, tokens_B.unsqueeze(-1)).squeeze(-1), logprobs_BV
