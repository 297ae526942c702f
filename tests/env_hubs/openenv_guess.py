"""A small OpenEnv environment, of OpenEnv's own base classes, for tests/env_hubs/test_openenv_env.py
(imported only by the tests that run it: OpenEnv takes seconds to import). Guess a number from
"higher"/"lower" replies; reward 1 on the step that finds it."""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class GuessAction(Action):
    guess: int = Field(description="the guessed number")


class GuessObservation(Observation):
    message: str = Field("", description="what the host says")


class GuessEnvironment(Environment):
    """The secret is 6 or 7 (from the seed); `top` is the largest number."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, top: int = 10) -> None:
        super().__init__()
        self.top = top
        self.secret = 0
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GuessObservation:
        self.secret = 6 + (seed or 0) % 2
        self._state = State(step_count=0)
        return GuessObservation(message=f"Guess my number from 1 to {self.top}.")

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        if action.guess == self.secret:
            return GuessObservation(message="Right!", done=True, reward=1.0)
        hint = "Higher." if action.guess < self.secret else "Lower."
        return GuessObservation(message=hint, reward=0.0)

    @property
    def state(self) -> State:
        return self._state
