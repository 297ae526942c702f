"""Completers: any model behind a sampling client, called as a policy, an assistant, or a judge,
on every backend (they use only the `SamplingClient` port).

- `TokenCompleter`: tokens in, sampled tokens (with logprobs) out, stopping at a stop condition:
  what RL policies use.
- `MessageCompleter`: messages in, one assistant message out, through a chat renderer (its
  generation prompt, its stop sequences, its parser).
- `PreferenceModelJudge`: a model trained on `train_core.preference.comparison_prompt` examples,
  asked which of two completions is better; it answers in [-1, 1] from its probabilities of the
  answer labels, with no sampling.
- `RewardModelJudge`: a Bradley-Terry reward model (`rm`) comparing its two completions' scores.
- `as_async_judge`: a plain (synchronous) judge, such as a rule, as an async one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kitchen.engine.ports import SamplingClient
from train_core.preference.bradley_terry import conversation_tokens
from train_core.preference.comparison_prompt import answer_labels, comparison_prompt, judge_score
from train_core.renderers.base import Message, Renderer
from train_core.renderers.train_on_what import TrainOnWhat
from train_core.types import ModelInput, SamplingParams, StopCondition, TokensWithLogprobs

AsyncJudge = Callable[[Sequence[Message], Message, Message], Awaitable[float]]


class TokenCompleter:
    """One sampled continuation of a token prompt; the stop condition replaces `params.stop`."""

    def __init__(self, client: SamplingClient, params: SamplingParams) -> None:
        self.client, self.params = client, params

    async def __call__(self, prompt: ModelInput, stop: StopCondition) -> TokensWithLogprobs:
        result = await self.client.sample(prompt, 1, dataclasses.replace(self.params, stop=stop))
        return result.sequences[0]


class MessageCompleter:
    """Messages in, the model's assistant reply out (a reply cut off by `max_tokens` keeps its raw
    text). Stops at the renderer's stop sequences."""

    def __init__(self, client: SamplingClient, renderer: Renderer, params: SamplingParams) -> None:
        self.renderer = renderer
        self.tokens = TokenCompleter(client, params)

    async def __call__(self, messages: Sequence[Message]) -> Message:
        prompt = self.renderer.build_generation_prompt(list(messages))
        sampled = await self.tokens(prompt, self.renderer.get_stop_sequences())
        message, _ = self.renderer.parse_response(sampled.tokens)
        return message


class PreferenceModelJudge:
    """A learned pairwise judge. For each answer label (`A`, `B`, optionally `Tie`) it scores the
    comparison prompt followed by that label as the assistant reply, as the model was trained
    (one `compute_logprobs` call per label, all submitted at once, no sampling), renormalises the
    labels' probabilities and answers P(B) - P(A)."""

    def __init__(self, client: SamplingClient, renderer: Renderer, allow_tie: bool = False) -> None:
        self.client, self.renderer, self.allow_tie = client, renderer, allow_tie

    async def label_logprobs(
        self, prompt: Sequence[Message], completion_A: Message, completion_B: Message
    ) -> dict[str, float]:
        question = comparison_prompt(prompt, [completion_A], [completion_B], self.allow_tie)
        labels = answer_labels(self.allow_tie)
        examples = [
            self.renderer.build_supervised_example(
                [*question, {"role": "assistant", "content": label}], TrainOnWhat.LAST_ASSISTANT_MESSAGE
            )
            for label in labels
        ]
        outputs = await asyncio.gather(*(self.client.compute_logprobs(tokens) for tokens, _ in examples))
        return {
            label: sum(float(lp) * float(w) for lp, w in zip(logprobs, weights, strict=True) if lp is not None and w)
            for label, (_, weights), logprobs in zip(labels, examples, outputs, strict=True)
        }

    async def __call__(self, prompt: Sequence[Message], completion_A: Message, completion_B: Message) -> float:
        return judge_score(await self.label_logprobs(prompt, completion_A, completion_B))


class RewardModelJudge:
    """A Bradley-Terry reward model (the `rm` recipe's checkpoint) as a pairwise judge: each
    completion's score `log p(pos) - log p(neg)` after the rendered conversation (two
    `compute_logprobs` calls, no sampling), answering `tanh((s_B - s_A) / 2)`, which is
    P(B beats A) - P(A beats B) under the Bradley-Terry model."""

    def __init__(self, client: SamplingClient, renderer: Renderer, score_tokens: tuple[int, int]) -> None:
        self.client, self.renderer, self.score_tokens = client, renderer, score_tokens

    async def score(self, prompt: Sequence[Message], completion: Message) -> float:
        tokens = conversation_tokens(self.renderer, prompt, [completion])
        pos, neg = await asyncio.gather(
            *(self.client.compute_logprobs(ModelInput.from_ints([*tokens, t])) for t in self.score_tokens)
        )
        return float(pos[-1] or 0.0) - float(neg[-1] or 0.0)

    async def __call__(self, prompt: Sequence[Message], completion_A: Message, completion_B: Message) -> float:
        score_A, score_B = await asyncio.gather(self.score(prompt, completion_A), self.score(prompt, completion_B))
        return math.tanh((score_B - score_A) / 2.0)


def as_async_judge(judge: Callable[[Sequence[Message], Message, Message], Any]) -> AsyncJudge:
    """`judge` as an async judge, whether it returns a score or an awaitable of one."""

    async def call(prompt: Sequence[Message], completion_A: Message, completion_B: Message) -> float:
        result = judge(prompt, completion_A, completion_B)
        if inspect.isawaitable(result):
            result = await result
        return float(result)

    return call
