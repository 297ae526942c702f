"""A thinking budget for reasoning models (s1's "budget forcing", as vLLM's and SGLang's
`thinking_token_budget` do it): a reply may think for at most `budget` tokens; one still thinking
then has its think block closed with the renderer's end-of-thinking token and goes on to write
its answer in what is left of `max_tokens`.

The reply is sampled in two requests: the first `budget` tokens, then, for a reply cut off there,
the rest, after the first request's tokens (plus the end-of-thinking token when the think block
was still open). Nothing else is inserted (no "Final Answer:" cue: s1 makes one optional and the
serving engines add none). A token counts as thinking from the opening delimiter (or the start of
the reply, when the prompt opens the block) up to, not including, the closing one, so a budget of
N allows at most N thinking tokens. The second request stops at an opening delimiter: a reply does
not think again after its budget's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kitchen.engine.errors import ConfigError
from kitchen.engine.ports import SamplingClient
from train_core.renderers.base import Renderer
from train_core.renderers.tokenizer import TokenCodec
from train_core.types import EncodedTextChunk, ModelInput, SamplingParams, StopCondition


@dataclass(frozen=True)
class ThinkTokens:
    """The tokens that open and close a think block in a renderer's format."""

    open: int
    close: int
    open_text: str

    @classmethod
    def of(cls, renderer: Renderer) -> ThinkTokens:
        """`renderer`'s think tokens; a renderer without a thinking format is a ConfigError naming it."""
        if renderer.think_delimiters is None:
            raise ConfigError(
                f"thinking_budget: renderer {type(renderer).__name__} has no thinking format (no think "
                "delimiters), so there is no thinking to bound; leave thinking_budget unset or use a reasoning "
                "model's renderer (qwen3, deepseekv3_thinking, ...)"
            )
        codec = TokenCodec(renderer.tokenizer)
        opening, closing = renderer.think_delimiters
        return cls(codec.special_id(opening), codec.special_id(closing), opening)

    def scan(self, tokens: Sequence[int], open_at_start: bool) -> tuple[int, bool]:
        """(thinking tokens among `tokens`, whether a think block is open after them), starting
        inside one when `open_at_start`."""
        thinking, inside = 0, open_at_start
        for token in tokens:
            if token == self.close:
                inside = False
            elif token == self.open:
                inside = True
            thinking += inside
        return thinking, inside

    def stop_before_opening(self, stop: StopCondition | None) -> StopCondition:
        """`stop` and the opening delimiter, in `stop`'s kind (ids or strings)."""
        if stop and isinstance(stop[0], str):
            return [*(str(s) for s in stop), self.open_text]
        return [*(int(s) for s in stop or ()), self.open]


@dataclass(frozen=True)
class BudgetedReply:
    """One reply sampled under a thinking budget, and its token accounting."""

    tokens: list[int]
    """Every token of the reply: sampled ones and the forced end-of-thinking token."""
    thinking_tokens: int
    budget_forced: bool
    """Whether the budget ran out mid-thought and the think block was closed for the model."""


def prompt_tokens(prompt: ModelInput) -> list[int]:
    """The prompt's token ids (an image chunk has none, and opens or closes no think block)."""
    return [token for chunk in prompt.chunks if isinstance(chunk, EncodedTextChunk) for token in chunk.tokens]


def continuation(prompt: ModelInput, sampled: Sequence[int], close: int | None) -> ModelInput:
    """What the second request continues: the prompt, the reply so far and, where `close` is
    given (the budget ran out mid-thought), the end-of-thinking token."""
    tokens = (*sampled, close) if close is not None else tuple(sampled)
    return prompt.append(EncodedTextChunk(tuple(tokens))) if tokens else prompt


async def sample_within_budget(
    sampler: SamplingClient,
    think: ThinkTokens,
    prompt: ModelInput,
    samples: int,
    params: SamplingParams,
    budget: int,
    continuation_seeds: Sequence[int | None],
) -> list[BudgetedReply]:
    """`samples` replies to `prompt`, each thinking at most `budget` tokens and all of it within
    `params.max_tokens` (`EvalSettings` has it exceed `budget`); reply k's second request is
    seeded with `continuation_seeds[k]`."""
    max_tokens = params.max_tokens
    if max_tokens is None:
        raise ValueError("a thinking budget is a part of max_tokens, which is not set")
    _, open_at_start = think.scan(prompt_tokens(prompt), open_at_start=False)
    first = await sampler.sample(prompt, samples, replace(params, max_tokens=budget))
    answer_stop = think.stop_before_opening(params.stop)
    replies = []
    for sequence, seed in zip(first.sequences, continuation_seeds, strict=True):
        tokens = list(sequence.tokens)
        thinking, still_open = think.scan(tokens, open_at_start)
        if sequence.stop_reason == "stop":
            replies.append(BudgetedReply(tokens, thinking, False))
            continue
        close = think.close if still_open else None
        if close is not None:
            tokens.append(close)
        left = max_tokens - len(tokens)
        if left > 0:
            rest_params = replace(params, max_tokens=left, seed=seed, stop=answer_stop)
            (rest,) = (await sampler.sample(continuation(prompt, sequence.tokens, close), 1, rest_params)).sequences
            answer = list(rest.tokens)
            if rest.stop_reason == "stop" and answer and answer[-1] == think.open:
                answer.pop()  # the reply would think again: it ends here
            tokens += answer
        replies.append(BudgetedReply(tokens, thinking, close is not None))
    return replies
