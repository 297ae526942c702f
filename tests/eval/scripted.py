"""A sampling client that answers each prompt with chosen text, for the tests of what happens
after sampling (prompt building, extraction, grading, metrics): no model that runs here writes
a benchmark's answers on demand. Everything else is the real task."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

from adapters.common.tokenizer import load_tokenizer
from kitchen.engine.eval_tasks import EvalModel, TaskResult, get_task
from train_core.renderers.registry import get_renderer
from train_core.types import ModelInput, SampleResult, SamplingParams, TokensWithLogprobs

Reply = Callable[[str, int], str]
"""(the whole prompt as text, sample index) -> the reply text."""


class ScriptedSampler:
    def __init__(self, tokenizer: Any, reply: Reply, label_logprob: Callable[[str], float] | None = None) -> None:
        self.tokenizer, self.reply, self.label_logprob = tokenizer, reply, label_logprob
        self.prompts: list[str] = []

    async def sample(self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams) -> SampleResult:
        text = self.tokenizer.decode(prompt.to_ints())
        self.prompts.append(text)
        return SampleResult(
            [
                TokensWithLogprobs(self.tokenizer.encode(self.reply(text, k), add_special_tokens=False), None)
                for k in range(num_samples)
            ]
        )

    async def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        """A judge scoring its one-token answer: the label's logprob on the label's token (the
        last token that decodes to a label), certainty everywhere else."""
        if self.label_logprob is None:
            raise AssertionError("this task does not score")
        tokens = prompt.to_ints()
        texts = [self.tokenizer.decode([t]).strip() for t in tokens]
        at = max(i for i, text in enumerate(texts) if text in ("m", "M"))
        return [None] + [self.label_logprob(texts[i]) if i == at else 0.0 for i in range(1, len(tokens))]


def evaluate(
    task: str, reply: Reply, judge_sampler: ScriptedSampler | None = None, **settings: Any
) -> tuple[TaskResult, ScriptedSampler]:
    tokenizer = load_tokenizer("tiny")
    sampler = ScriptedSampler(tokenizer, reply)

    async def open_sampler(model: str) -> Any:
        assert judge_sampler is not None and model == "judge-model", model
        return judge_sampler

    model = EvalModel(
        sampler,
        get_renderer("role_colon", tokenizer),
        tokenizer,
        "scripted",
        open_sampler,
        None,
        {},
        lambda _: tokenizer,
    )
    spec = get_task(task)
    return asyncio.run(spec.evaluate(model, spec.settings(**settings))), sampler


def probability(logprob_m: float, logprob_big_m: float) -> float:
    return 1 / (1 + math.exp(logprob_m - logprob_big_m))
