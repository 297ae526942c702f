"""Single-turn question/answer environments (math, code, ...) and the group builder for them.

The policy sees the question as a user message rendered into a generation prompt and answers
once. Reward: `format_coef * (format_ok - 1) + correct`, so a correct answer in the wrong format
still earns most of the reward, and a well-formatted wrong answer earns nothing.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.types import Action, Env, EnvGroupBuilder, StepResult
from train_core.types import ModelInput, StopCondition


class ProblemEnv(Env):
    """One question, one answer, graded by `check_answer` and `check_format` on the reply text."""

    def __init__(self, renderer: Renderer, convo_prefix: Sequence[Message] = (), format_coef: float = 0.1) -> None:
        self.renderer = renderer
        self.convo_prefix = list(convo_prefix)
        self.format_coef = format_coef

    @abstractmethod
    def get_question(self) -> str: ...

    @abstractmethod
    def check_answer(self, response: str) -> bool:
        """Whether the reply's answer is correct."""

    @abstractmethod
    def check_format(self, response: str) -> bool:
        """Whether the reply states its answer in the asked-for form (e.g. `\\boxed{}`)."""

    @abstractmethod
    def get_reference_answer(self) -> str:
        """The expected answer, for logs and transcripts."""

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        messages: list[Message] = [*self.convo_prefix, {"role": "user", "content": self.get_question()}]
        return self.renderer.build_generation_prompt(messages), self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        message, parsed = self.renderer.parse_response(action)
        response = message["content"]
        format_ok = float(parsed and self.check_format(response))
        correct = float(self.check_answer(response))
        return StepResult(
            reward=self.format_coef * (format_ok - 1.0) + correct,
            episode_done=True,
            next_observation=ModelInput.empty(),
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={"format": format_ok, "correct": correct},
            parse_ok=parsed,
        )


@dataclass(frozen=True)
class ProblemGroupBuilder(EnvGroupBuilder):
    """`num_envs` copies of one problem (from `env_thunk`); rewards come from the envs alone."""

    env_thunk: Callable[[], ProblemEnv]
    num_envs: int
    dataset_name: str = "problems"

    async def make_envs(self) -> list[ProblemEnv]:
        return [self.env_thunk() for _ in range(self.num_envs)]

    def logging_tags(self) -> list[str]:
        return [self.dataset_name]
