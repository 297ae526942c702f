"""Autoregressive sampling with a KV cache: all samples of a batch of requests decoded together.

Requests with the same sampling params share one decode. Each prompt is run once and its KV cache
copied to its sample rows. Each request draws all its random numbers up front from its own
generator (one uniform per sample row and token, `[num_samples, max_tokens]`), so a seed gives the
same samples whether the request ran alone or with others; each decode step then picks every
row's token in one batched inverse-CDF lookup.

Reported logprobs are those of the sampled token under the temperature-scaled distribution
`log_softmax(logits / temperature)`, taken before top-k / top-p truncation (the truncation only
decides which tokens may be drawn); `topk_logprobs` reports that distribution's most likely
tokens. At temperature 1 they therefore equal the training logprobs. Temperature 0 means greedy
decoding; its logprobs are then the untempered ones. The token that triggers a stop (a stop id,
or the token completing a stop string) is kept in the output, as the Tinker sampler does.

A request that follows a weight feed (`Following`: in-flight weight updates) looks at the feed
before each decode step; when newer local weights were published, the decode switches to them:
every row's context (prompt and tokens so far) is prefilled again under the new model, so the
tokens after the switch are drawn from, and carry the logprobs of, exactly the new weights (no
stale KV cache). Each token is tagged with the version that produced it.

The requests of several LoRA clients of one base model decode together on a grouped-LoRA host
(`ClientAdapters`): every forward runs the base once over all rows, each row's tokens through its
own client's adapters (`adapters.local.grouped_lora.bind`), so each client samples what it would
alone (its seeds, its adapters) to float rounding.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache

from adapters.common.stop_matcher import StopMatcher
from adapters.local.forward_pass import left_pad, takes_packed_mask
from adapters.local.grouped_lora import AdapterLayer, bind
from adapters.local.kv_cache import packed_inputs, unpacked_cache
from adapters.local.sampler_pool import ModelLease
from adapters.local.token_draw import next_tokens, top_logprobs
from adapters.local.vision import sample_with_images
from kitchen.engine.ports import WeightFeed
from train_core.types import ImageChunk, SamplingParams, StopReason, TokensWithLogprobs

CACHE_ROOM = 512
"""Decode positions the KV cache holds before it first grows (it doubles when full): a budget up to
the context length is not allocated up front."""

PACK_TOKENS = 256
"""Prompts prefill packed into rows of up to this many tokens (a longer prompt alone): attention
over a packed row also computes its masked-out blocks (on the 50M benchmark model, 16 prompts:
50 ms of a 440 ms prefill at 512, 31 ms at 256, 23 ms at 128, where smaller matmuls cost more)."""


@dataclass(frozen=True)
class Following:
    """A request's weight feed, and the version (in the feed's numbering) of the weights it starts with."""

    feed: WeightFeed
    version: int

    def newer(self, version: int, model: torch.nn.Module) -> tuple[int, ModelLease] | None:
        """The newest published local weights for the same architecture, if newer than `version`."""
        newest, client = self.feed.latest()
        lease = getattr(client, "lease", None)
        if newest > version and isinstance(lease, ModelLease) and type(lease.model) is type(model):
            return newest, lease
        return None


@dataclass(frozen=True)
class SampleRequest:
    """One `sample` call, checked and resolved: its prompt, token budget and seed."""

    prompt: list[int]
    num_samples: int
    max_tokens: int
    seed: int
    params: SamplingParams
    stop: StopMatcher
    images: tuple[ImageChunk, ...] = ()
    """The prompt's images (a vision-language model); their positions in `prompt` hold its image token."""
    following: Following | None = None

    @property
    def key(self) -> Hashable:
        """Requests that sample the same way share a batch (prompts, counts and seeds may differ).

        The token budget is the resolved one: without max_tokens a longer prompt may decode fewer
        tokens (up to the context length), and no row may decode past its own budget.
        """
        p = self.params
        stop = None if p.stop is None else tuple(p.stop)
        follows = None if self.following is None else (id(self.following.feed), self.following.version)
        return (p.temperature, p.top_k, p.top_p, self.max_tokens, stop, bool(self.images), follows)

    @property
    def rows(self) -> int:
        return self.num_samples

    @property
    def length(self) -> int:
        return len(self.prompt) + self.max_tokens


@dataclass(frozen=True)
class ClientAdapters:
    """The LoRA clients whose requests decode together on a grouped-LoRA host: each one's adapters
    (`adapters_G`), the client of each request of the batch (`client_R`), and the name of the
    host's output head (it sees only the positions whose logits a forward keeps)."""

    adapters_G: list[dict[str, AdapterLayer]]
    client_R: list[int]
    head: str | None

    def bound(
        self, host: torch.nn.Module, body_P: Sequence[int], head_P: Sequence[int]
    ) -> AbstractContextManager[object]:
        """A forward of `host` whose layers see the requests `body_P` at their flattened positions,
        and whose output head sees `head_P`: each position through its request's client's adapters."""
        device = next(host.parameters()).device
        stack = ExitStack()
        for layers, requests_P in ((lambda name: name != self.head, body_P), (lambda name: name == self.head, head_P)):
            adapters_G = [{n: a for n, a in adapters.items() if layers(n)} for adapters in self.adapters_G]
            groups_P = torch.tensor([self.client_R[r] for r in requests_P], dtype=torch.long, device=device)
            stack.enter_context(bind(host, adapters_G, groups_P))
        return stack


Through = Callable[[Sequence[int], Sequence[int]], AbstractContextManager[object]]
"""A forward's adapters: given the request of each flattened position its layers see, and of each
its output head sees, the binding to run it in."""


def draw_uniforms(requests: Sequence[SampleRequest], device: torch.device) -> torch.Tensor:
    """Every random number the batch will use, [B, max_tokens]: each request's rows come from a
    generator seeded with its seed alone, on the cpu (the same numbers on every device)."""
    max_tokens = requests[0].max_tokens
    rows = [torch.rand((r.num_samples, max_tokens), generator=torch.Generator().manual_seed(r.seed)) for r in requests]
    return torch.cat(rows).to(device)


def _no_binding(body_P: Sequence[int], head_P: Sequence[int]) -> AbstractContextManager[object]:
    return nullcontext()


def _prefill(
    model: torch.nn.Module,
    requests: Sequence[SampleRequest],
    pad_id: int,
    device: torch.device,
    through: Through = _no_binding,
) -> tuple[torch.Tensor, Cache, torch.Tensor, torch.Tensor]:
    """Run each prompt once, then give every sample row a copy of its prompt's KV cache.

    Returns the next-token logits [B, V], the cache, the attention mask [B, L + max_tokens] (the
    decode's columns already ones; step t uses the first L + t + 1) and the last position of each
    row [B, 1]. Prompts run packed, without pads, where every layer is full attention (see
    `adapters.local.kv_cache`); otherwise left-padded, keeping the model's own cache.
    """
    prompts = [r.prompt for r in requests]
    input_ids_RL, mask_RL, positions_RL = left_pad(prompts, pad_id, device)
    prompt_of_B = torch.repeat_interleave(
        torch.arange(len(requests), device=device), torch.tensor([r.num_samples for r in requests], device=device)
    )
    max_tokens = requests[0].max_tokens
    mask_BL = torch.cat([mask_RL[prompt_of_B], mask_RL.new_ones(len(prompt_of_B), max_tokens)], dim=-1)
    if takes_packed_mask(model):
        logits_RV, caches = _packed_prefill(model, prompts, device, through)
        lengths_R = mask_RL.sum(-1)
        source_RL = (lengths_R.cumsum(0) - lengths_R)[:, None] + positions_RL  # each slot's packed position
        cache = unpacked_cache(caches, source_RL[prompt_of_B], mask_RL[prompt_of_B], min(max_tokens, CACHE_ROOM))
        return logits_RV[prompt_of_B], cache, mask_BL, positions_RL[prompt_of_B, -1:]
    with through([r for r in range(len(requests)) for _ in range(input_ids_RL.shape[1])], range(len(requests))):
        output = model(
            input_ids=input_ids_RL, attention_mask=mask_RL, position_ids=positions_RL, use_cache=True, logits_to_keep=1
        )
    # Rows are selected through `reorder_cache`, which every cache layer implements for all its
    # state (a linear-attention or Mamba layer's conv and recurrent states too), where
    # `batch_select_indices` exists only on key/value layers.
    output.past_key_values.reorder_cache(prompt_of_B)
    return output.logits[prompt_of_B, -1, :], output.past_key_values, mask_BL, positions_RL[prompt_of_B, -1:]


def _packed_prefill(
    model: torch.nn.Module, prompts: Sequence[Sequence[int]], device: torch.device, through: Through
) -> tuple[torch.Tensor, list[Cache]]:
    """The prompts' next-token logits [P, V] and the caches of the packed rows they ran in, in order
    (consecutive prompts share a row up to PACK_TOKENS tokens)."""
    dtype = next(model.parameters()).dtype
    logits, caches = [], []
    first = 0
    while first < len(prompts):
        last, tokens = first + 1, len(prompts[first])
        while last < len(prompts) and tokens + len(prompts[last]) <= PACK_TOKENS:
            tokens += len(prompts[last])
            last += 1
        input_ids, positions, mask, ends = packed_inputs(prompts[first:last], dtype, device)
        with through([p for p in range(first, last) for _ in prompts[p]], range(first, last)):
            output = model(
                input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=ends
            )
        logits.append(output.logits[0])
        caches.append(output.past_key_values)
        first = last
    return torch.cat(logits), caches


@torch.inference_mode()
def sample_batch(
    model: torch.nn.Module, requests: Sequence[SampleRequest], pad_id: int, clients: ClientAdapters | None = None
) -> list[list[TokensWithLogprobs]]:
    """Decode every request's samples together, each until it stops or hits max_tokens.

    The requests share sampling params and token budget (their `key`). Each request's random
    numbers come from its own generator seeded with its seed (`draw_uniforms`), the same numbers
    for the same rows as it would use alone, so a seed gives the same samples whatever else shares
    the batch. Prompts are left-padded to end together. Once a quarter of the rows have stopped,
    the finished ones leave the batch (their cache rows too): the others decode on in fewer rows.
    Following requests (all of a batch alike: their `key`) may switch weights between decode steps
    (see the module doc); their tokens carry versions. With `clients`, `model` is a grouped-LoRA
    host and each request's rows run through its client's adapters (no images, no weight feed).
    """
    params, stop, max_tokens = requests[0].params, requests[0].stop, requests[0].max_tokens
    device = next(model.parameters()).device
    through = _no_binding
    if clients is not None:
        if requests[0].images or requests[0].following is not None:
            raise ValueError("requests with images or a weight feed decode alone, not through a LoRA host")
        through = functools.partial(clients.bound, model)

    if requests[0].images:  # prompts with images run one at a time (`adapters.local.vision`)
        return [
            sample_with_images(
                model,
                r.prompt,
                r.images,
                r.num_samples,
                max_tokens,
                params,
                r.stop,
                None if params.temperature == 0.0 else draw_uniforms([r], device),
                pad_id,
            )
            for r in requests
        ]
    row_ranges: list[slice] = []
    for request in requests:
        start = row_ranges[-1].stop if row_ranges else 0
        row_ranges.append(slice(start, start + request.num_samples))
    batch_size = row_ranges[-1].stop
    uniforms_NT = None if params.temperature == 0.0 else draw_uniforms(requests, device)
    logits_NV, cache, mask_NL, positions_N1 = _prefill(model, requests, pad_id, device, through)
    prompt_width = mask_NL.shape[-1] - max_tokens
    following = requests[0].following
    version = 0 if following is None else following.version
    held: list[ModelLease] = []  # the newer weights switched to: not reused by the pool while in use
    prompt_of_B = [request.prompt for request in requests for _ in range(request.num_samples)]
    request_of_B = [r for r, request in enumerate(requests) for _ in range(request.num_samples)]
    tokens_B: list[list[int]] = [[] for _ in range(batch_size)]
    versions_B: list[list[int]] = [[] for _ in range(batch_size)]
    logprobs_B: list[list[float]] = [[] for _ in range(batch_size)]
    topk_B: list[list[list[tuple[int, float]]]] = [[] for _ in range(batch_size)]
    reasons_B: list[StopReason | None] = [None] * batch_size
    rows_N = list(range(batch_size))  # the row each of the N rows still decoding is
    for step in range(max_tokens):
        uniforms_N = None if uniforms_NT is None else uniforms_NT[:, step]
        new_tokens_N, new_logprobs_N, distribution_NV = next_tokens(logits_NV, params, uniforms_N)
        topk_N = top_logprobs(distribution_NV, params.topk_logprobs) if params.topk_logprobs > 0 else None
        for index, (row, token, logprob) in enumerate(
            zip(rows_N, new_tokens_N.tolist(), new_logprobs_N.tolist(), strict=True)
        ):
            if reasons_B[row] is not None:
                continue  # finished since the batch last shrank: its extra tokens are dropped
            tokens_B[row].append(token)
            logprobs_B[row].append(logprob)
            if topk_N is not None:
                topk_B[row].append(topk_N[index])
            versions_B[row].append(version)
            if stop.is_done(tokens_B[row]):
                reasons_B[row] = "stop"
        live = [index for index, row in enumerate(rows_N) if reasons_B[row] is None]
        if step == max_tokens - 1 or not live:
            break  # no forward for tokens that will not be drawn
        if len(live) <= len(rows_N) * 3 // 4:  # a quarter of the rows finished: they leave the batch
            keep_N = torch.tensor(live, device=device)
            cache.reorder_cache(keep_N)  # type: ignore[arg-type]  # an int64 tensor (LongTensor is a legacy alias)
            mask_NL, positions_N1, new_tokens_N = mask_NL[keep_N], positions_N1[keep_N], new_tokens_N[keep_N]
            uniforms_NT = None if uniforms_NT is None else uniforms_NT[keep_N]
            rows_N = [rows_N[index] for index in live]
        newer = None if following is None else following.newer(version, model)
        if newer is not None:  # in-flight weight update: prefill every row's context again under them
            version, lease = newer
            held.append(lease)
            model = lease.model
            contexts = [
                SampleRequest([*prompt_of_B[row], *tokens_B[row]], 1, max_tokens - step - 1, 0, params, stop)
                for row in rows_N
            ]
            logits_NV, cache, mask_NL, positions_N1 = _prefill(model, contexts, pad_id, device)
            prompt_width = mask_NL.shape[-1] - (max_tokens - step - 1) - (step + 1)  # keeps the slice below
            continue
        positions_N1 = positions_N1 + 1
        decoding = [request_of_B[row] for row in rows_N]
        with through(decoding, decoding):
            output = model(
                input_ids=new_tokens_N.unsqueeze(-1),
                attention_mask=mask_NL[:, : prompt_width + step + 1],
                position_ids=positions_N1,
                past_key_values=cache,
                use_cache=True,
            )
        logits_NV, cache = output.logits[:, -1, :], output.past_key_values
    sequences_B = [
        TokensWithLogprobs(
            tokens,
            logprobs,
            reason or "length",
            None if following is None else versions,
            topk if params.topk_logprobs > 0 else None,
        )
        for tokens, logprobs, reason, versions, topk in zip(
            tokens_B, logprobs_B, reasons_B, versions_B, topk_B, strict=True
        )
    ]
    return [sequences_B[request_rows] for request_rows in row_ranges]
