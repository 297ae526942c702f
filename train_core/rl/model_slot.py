"""A second model an environment samples from or scores with: a game's opponent, twenty
questions' answerer, a rubric grader, a process reward model. The environment names it (a base
model, a checkpoint, or nothing: the run's base model) when its task is built, before any model
is open; the run opens it and binds a sampler to the slot before the first rollout
(`kitchen.families.rl` does, for every `RLTask.models` slot)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Protocol, runtime_checkable

from train_core.rl.rollouts import Sampler
from train_core.types import ModelInput, SamplingParams, StopCondition, TokensWithLogprobs


@runtime_checkable
class ScoresPrompts(Protocol):
    """A sampler that also scores a given text (kitchen's SamplingClient does)."""

    async def compute_logprobs(self, prompt: ModelInput) -> list[float | None]: ...


class ModelSlot:
    """Where an env's second model is bound. `role` names it in logs and errors; `model_name` and
    `checkpoint` say which model to open (both None: the run's base model, untrained);
    `max_concurrent` bounds its calls in flight (0: no bound)."""

    def __init__(
        self, role: str, model_name: str | None = None, checkpoint: str | None = None, max_concurrent: int = 64
    ) -> None:
        self.role, self.model_name, self.checkpoint = role, model_name, checkpoint
        self.sampler: Sampler | None = None
        self._limit = asyncio.Semaphore(max_concurrent) if max_concurrent > 0 else None

    def bind(self, sampler: Sampler) -> None:
        self.sampler = sampler

    async def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        """The bound model's logprob of each token of `prompt` given those before it (the first is
        None): how a reward model or a process reward model reads its scores."""
        if self.sampler is None:
            raise RuntimeError(f"no model is bound to the {self.role!r} slot: the run opens it before rolling out")
        if not isinstance(self.sampler, ScoresPrompts):
            raise RuntimeError(f"the model bound to the {self.role!r} slot cannot score a prompt")
        if self._limit is None:
            return await self.sampler.compute_logprobs(prompt)
        async with self._limit:
            return await self.sampler.compute_logprobs(prompt)

    async def sample(self, prompt: ModelInput, params: SamplingParams, stop: StopCondition) -> TokensWithLogprobs:
        """One continuation of `prompt` by the bound model, stopping at `stop`."""
        if self.sampler is None:
            raise RuntimeError(f"no model is bound to the {self.role!r} slot: the run opens it before rolling out")
        params = dataclasses.replace(params, stop=stop)
        if self._limit is None:
            return (await self.sampler.sample(prompt, 1, params)).sequences[0]
        async with self._limit:
            return (await self.sampler.sample(prompt, 1, params)).sequences[0]
