"""On-policy distillation's pure parts: prompt-only envs, a composite of prompt datasets (each with
its own teacher), and the teacher's reverse-KL folded into advantages.

The student samples completions for prompts (reward 0); the teacher scores the sampled tokens;
per action token `rkl_t = lp_student_sampled - lp_teacher`, and `advantages -= coef * rkl_t`, with
no batch-mean baseline (unlike the reference KL penalty), optionally as a discounted future sum.
Trained with importance sampling, this follows the gradient of the reverse KL to the teacher.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.kl_penalty import discounted_future_sum
from train_core.rl.types import Action, Env, EnvGroupBuilder, RLDataset, StepResult
from train_core.types import Datum, ModelInput, StopCondition, TensorData

if TYPE_CHECKING:
    import torch


class PromptOnlyEnv(Env):
    """One reply to a prompt, with reward 0: what the reply earns comes from the teacher's KL."""

    def __init__(self, prompt: Sequence[Message], renderer: Renderer) -> None:
        self.prompt = list(prompt)
        self.renderer = renderer

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        return self.renderer.build_generation_prompt(self.prompt), self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        return StepResult(
            reward=0.0,
            episode_done=True,
            next_observation=ModelInput.empty(),
            next_stop_condition=self.renderer.get_stop_sequences(),
        )


@dataclass(frozen=True)
class PromptGroupBuilder(EnvGroupBuilder):
    """`num_envs` replies to one prompt of the data set `dataset_name` (its logging tag)."""

    prompt: tuple[Message, ...]
    renderer: Renderer
    num_envs: int
    dataset_name: str

    async def make_envs(self) -> list[PromptOnlyEnv]:
        return [PromptOnlyEnv(self.prompt, self.renderer) for _ in range(self.num_envs)]

    def logging_tags(self) -> list[str]:
        return [self.dataset_name]


class PromptDataset(RLDataset):
    """Batches of `groups_per_batch` prompts, in a seeded order that is reshuffled each pass."""

    def __init__(
        self,
        name: str,
        prompts: Sequence[Sequence[Message]],
        renderer: Renderer,
        groups_per_batch: int,
        group_size: int,
        seed: int,
    ) -> None:
        if not prompts:
            raise ValueError(f"prompt dataset {name!r} has no prompts")
        self.name, self.prompts, self.renderer = name, [tuple(p) for p in prompts], renderer
        self.groups_per_batch, self.group_size, self.seed = groups_per_batch, group_size, seed

    def __len__(self) -> int:
        return max(1, len(self.prompts) // self.groups_per_batch)

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        per_pass = len(self)
        order = list(range(len(self.prompts)))
        random.Random(f"{self.name}/{self.seed}/{index // per_pass}").shuffle(order)
        start = (index % per_pass) * self.groups_per_batch
        picked = [order[(start + k) % len(order)] for k in range(self.groups_per_batch)]
        return [PromptGroupBuilder(self.prompts[i], self.renderer, self.group_size, self.name) for i in picked]


class CompositeDataset(RLDataset):
    """Several data sets in one step: batch `i` is each part's batch `i` (each cycled on its own),
    so every step trains on each part's own `groups_per_batch` share."""

    def __init__(self, parts: Sequence[RLDataset]) -> None:
        if not parts:
            raise ValueError("a composite dataset needs at least one part")
        self.parts = list(parts)

    def __len__(self) -> int:
        return max(len(part) for part in self.parts)

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        return [builder for part in self.parts for builder in part.get_batch(index % len(part))]


@dataclass(frozen=True)
class TeacherKL:
    """Per datum: the summed reverse KL to the teacher over its action tokens, and their count."""

    kl_sum_D: list[float]
    tokens_D: list[float]

    def mean(self, indices: Sequence[int] | None = None) -> float:
        picked = range(len(self.kl_sum_D)) if indices is None else indices
        tokens = sum(self.tokens_D[i] for i in picked)
        return sum(self.kl_sum_D[i] for i in picked) / tokens if tokens else 0.0


def incorporate_teacher_kl(
    data_D: Sequence[Datum], teacher_logprobs_D: Sequence[torch.Tensor], coef: float, discount: float = 0.0
) -> tuple[list[Datum], TeacherKL]:
    """New datums whose advantages include `-coef * mask * (lp_sampled - lp_teacher)` (discounted
    over the datum's tokens with `discount > 0`, then masked again), and the reverse KL per datum.

    `teacher_logprobs_D` are per target token; the data must still hold its mask."""
    new_data_D: list[Datum] = []
    kl_sum_D: list[float] = []
    tokens_D: list[float] = []
    for i, (datum, teacher_T) in enumerate(zip(data_D, teacher_logprobs_D, strict=True)):
        sampled_T = datum.loss_fn_inputs["logprobs"].to_torch().float()
        mask_T = datum.loss_fn_inputs["mask"].to_torch().float()
        if teacher_T.shape != sampled_T.shape:
            raise ValueError(
                f"datum {i}: {tuple(teacher_T.shape)} teacher logprobs for {tuple(sampled_T.shape)} targets"
            )
        reverse_kl_T = (sampled_T - teacher_T.float()) * mask_T
        penalty_T = -coef * reverse_kl_T
        if discount > 0:
            penalty_T = discounted_future_sum(penalty_T, discount) * mask_T
        advantages_T = datum.loss_fn_inputs["advantages"].to_torch().float() + penalty_T
        new_data_D.append(
            Datum(datum.model_input, {**datum.loss_fn_inputs, "advantages": TensorData.from_torch(advantages_T)})
        )
        kl_sum_D.append(float(reverse_kl_T.sum()))
        tokens_D.append(float(mask_T.sum()))
    return new_data_D, TeacherKL(kl_sum_D, tokens_D)
