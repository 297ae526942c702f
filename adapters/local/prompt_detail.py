"""A prompt's next-token distributions, summarised: what `score_prompt` reports beyond
`compute_logprobs` (the top-k tokens at each position, the logprobs of chosen targets, and
tokens drawn from the model's distribution), from one forward pass of the prompt.

The output head and softmax run a chunk of positions at a time (`token_scoring`), so a long prompt
over a large vocabulary never holds its whole [T, V] logits. Alternative tokens are drawn
independently (with replacement) from `softmax(logits / temperature)` by a generator seeded with
the request's seed (greedy at temperature 0), and carry their logprobs under that distribution.
"""

from __future__ import annotations

import torch

from adapters.local.token_draw import top_logprobs
from adapters.local.token_scoring import chunk_tokens_for, log_softmax_f32, output_head
from train_core.types import PromptDetail, PromptScores


def _logits_chunks(model: torch.nn.Module, tokens: list[int]) -> list[torch.Tensor]:
    """The logits predicting tokens 1..T-1, as [c, V] chunks."""
    device = next(model.parameters()).device
    ids_1T = torch.tensor([tokens], device=device)
    split = output_head(model)
    if split is None:
        return [model(input_ids=ids_1T, use_cache=False).logits[0, :-1]]
    hidden_TH = split.body(input_ids=ids_1T, use_cache=False).last_hidden_state[0, :-1]
    step = chunk_tokens_for(int(split.head(hidden_TH[:1]).shape[-1]))
    return [split.head(hidden_TH[start : start + step]) for start in range(0, hidden_TH.shape[0], step)]


@torch.inference_mode()
def score_prompt_detail(model: torch.nn.Module, tokens: list[int], detail: PromptDetail) -> PromptScores:
    """`tokens`' logprobs and what `detail` asks for at every position after the first."""
    generator = torch.Generator().manual_seed(detail.seed)
    chosen: list[float | None] = [None]
    topk: list[list[tuple[int, float]]] = []
    targets: list[list[float | None]] = []
    alt_tokens: list[list[int]] = []
    alt_logprobs: list[list[float]] = []
    start = 0
    for logits_cV in _logits_chunks(model, tokens):
        rows = logits_cV.shape[0]
        logprobs_cV = log_softmax_f32(logits_cV)
        next_c = torch.tensor(tokens[start + 1 : start + 1 + rows], device=logits_cV.device)
        chosen += logprobs_cV.gather(-1, next_c[:, None])[:, 0].tolist()
        if detail.topk > 0:
            topk += top_logprobs(logprobs_cV, detail.topk)
        if detail.targets is not None:
            grid_cK = torch.tensor(detail.targets[start : start + rows], device=logits_cV.device)
            found_cK = logprobs_cV.gather(-1, grid_cK.clamp(min=0)).tolist()
            asked_cK = (grid_cK >= 0).tolist()
            targets += [
                [v if a else None for v, a in zip(vs, asks, strict=True)]
                for vs, asks in zip(found_cK, asked_cK, strict=True)
            ]
        if detail.alt_k > 0:
            drawn_cK, drawn_lp_cK = _draw(logits_cV, detail, generator)
            alt_tokens += drawn_cK.tolist()
            alt_logprobs += drawn_lp_cK.tolist()
        start += rows
    return PromptScores(
        logprobs=chosen,
        topk=topk if detail.topk > 0 else None,
        targets=targets if detail.targets is not None else None,
        alt_tokens=alt_tokens if detail.alt_k > 0 else None,
        alt_logprobs=alt_logprobs if detail.alt_k > 0 else None,
    )


def _draw(
    logits_cV: torch.Tensor, detail: PromptDetail, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """`alt_k` independent draws per row and their logprobs under the tempered distribution."""
    if detail.temperature == 0.0:
        logprobs_cV = log_softmax_f32(logits_cV)
        drawn_cK = logprobs_cV.argmax(-1, keepdim=True).expand(-1, detail.alt_k)
    else:
        logprobs_cV = log_softmax_f32(logits_cV, detail.temperature)
        probs_cV = logprobs_cV.exp().cpu()
        drawn_cK = torch.multinomial(probs_cV, detail.alt_k, replacement=True, generator=generator)
        drawn_cK = drawn_cK.to(logits_cV.device)
    return drawn_cK, logprobs_cV.gather(-1, drawn_cK)
