"""Sampling from the geometric mixture of two models (Nash-MD's second completion): every token
is drawn from `softmax(c * reference_logits + (1 - c) * logits)` at the request's temperature,
i.e. proportional to `pi^(1-c) * pi_ref^c`, as TRL's `GeometricMixtureWrapper` draws it.

Both models decode the request's sample rows together, each with its own KV cache (the prompt is
shared, so no padding). The random numbers are drawn as `adapters.local.sampler` draws them (one
uniform per row and token from the request's seed) and tokens are picked by the same inverse-CDF
lookup, so at `c = 0` a seed draws what `sample` draws from the policy, and at `c = 1` what it
draws from the reference, up to float rounding. Reported logprobs are the mixture's
(temperature-scaled, before top-k / top-p truncation, as `sample` reports its model's).
"""

from __future__ import annotations

import torch

from adapters.local.sampler import SampleRequest, draw_uniforms
from adapters.local.token_draw import next_tokens, top_logprobs
from kitchen.engine.errors import DataError
from train_core.types import StopReason, TokensWithLogprobs


@torch.inference_mode()
def sample_mixture(
    model: torch.nn.Module, reference: torch.nn.Module, request: SampleRequest, mixture_coef: float
) -> list[TokensWithLogprobs]:
    """The request's samples from the mixture of `model` (weight `1 - mixture_coef`) and
    `reference` (weight `mixture_coef`) on the logit scale; rows that stop keep decoding with the
    others, their extra tokens dropped (a simple loop: Nash-MD's completions are short)."""
    params, max_tokens, rows = request.params, request.max_tokens, request.num_samples
    device = next(model.parameters()).device
    reference_device = next(reference.parameters()).device
    input_NL = torch.tensor([request.prompt] * rows, device=device)
    uniforms_NT = None if params.temperature == 0.0 else draw_uniforms([request], device)
    output = model(input_ids=input_NL, use_cache=True, logits_to_keep=1)
    reference_output = reference(input_ids=input_NL.to(reference_device), use_cache=True, logits_to_keep=1)
    cache, reference_cache = output.past_key_values, reference_output.past_key_values
    logits_NV, reference_NV = output.logits[:, -1, :], reference_output.logits[:, -1, :]
    if logits_NV.shape[-1] != reference_NV.shape[-1]:
        raise DataError(
            f"the geometric mixture needs models of one vocabulary: the policy has {logits_NV.shape[-1]} "
            f"logits, the reference {reference_NV.shape[-1]}"
        )
    tokens_B: list[list[int]] = [[] for _ in range(rows)]
    logprobs_B: list[list[float]] = [[] for _ in range(rows)]
    topk_B: list[list[list[tuple[int, float]]]] = [[] for _ in range(rows)]
    reasons_B: list[StopReason | None] = [None] * rows
    positions_N1 = torch.full((rows, 1), len(request.prompt) - 1, device=device)
    for step in range(max_tokens):
        mixed_NV = mixture_coef * reference_NV.to(device).float() + (1.0 - mixture_coef) * logits_NV.float()
        uniforms_N = None if uniforms_NT is None else uniforms_NT[:, step]
        new_tokens_N, new_logprobs_N, distribution_NV = next_tokens(mixed_NV, params, uniforms_N)
        topk_N = top_logprobs(distribution_NV, params.topk_logprobs) if params.topk_logprobs > 0 else None
        for row, (token, logprob) in enumerate(zip(new_tokens_N.tolist(), new_logprobs_N.tolist(), strict=True)):
            if reasons_B[row] is not None:
                continue
            tokens_B[row].append(token)
            logprobs_B[row].append(logprob)
            if topk_N is not None:
                topk_B[row].append(topk_N[row])
            if request.stop.is_done(tokens_B[row]):
                reasons_B[row] = "stop"
        if step == max_tokens - 1 or all(reason is not None for reason in reasons_B):
            break
        positions_N1 = positions_N1 + 1
        output = model(input_ids=new_tokens_N.unsqueeze(-1), position_ids=positions_N1, cache=cache, use_cache=True)
        reference_output = reference(
            input_ids=new_tokens_N.unsqueeze(-1).to(reference_device),
            position_ids=positions_N1.to(reference_device),
            cache=reference_cache,
            use_cache=True,
        )
        cache, reference_cache = output.past_key_values, reference_output.past_key_values
        logits_NV, reference_NV = output.logits[:, -1, :], reference_output.logits[:, -1, :]
    return [
        TokensWithLogprobs(tokens, logprobs, reason or "length", None, topk if params.topk_logprobs > 0 else None)
        for tokens, logprobs, reason, topk in zip(tokens_B, logprobs_B, reasons_B, topk_B, strict=True)
    ]
