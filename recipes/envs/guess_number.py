"""Guess the number: a multi-turn env. The policy guesses a secret integer in [1, max_number];
the env answers "Higher." or "Lower." after each wrong guess. Reward 1 for finding it within
`max_turns` guesses, else 0, so a policy that halves the range each turn (binary search) wins
every game when `max_turns >= ceil(log2(max_number + 1))`.

Each next observation re-renders the whole conversation, which extends the previous observation
and action, so a game trains as a single datum (prefix merging).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from kitchen.families.rl import EnvSettings, EnvSpec, RLSettings
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.math_grading import extract_last_number
from train_core.rl.task import RLTask
from train_core.rl.types import Action, Env, EnvGroupBuilder, RLDataset, StepResult
from train_core.types import ModelInput, StopCondition


@dataclass(frozen=True)
class Game:
    secret: int
    max_number: int
    max_turns: int

    def intro(self) -> Message:
        return Message(
            role="user",
            content=f"I am thinking of a number from 1 to {self.max_number}. Guess it! Reply with the number only.",
        )

    def feedback(self, guess: int | None) -> str:
        """What the env says after a wrong or unreadable guess."""
        if guess is None or not 1 <= guess <= self.max_number:
            return f"Please guess a number from 1 to {self.max_number}."
        return "Higher." if guess < self.secret else "Lower."


def read_guess(text: str) -> int | None:
    """The last integer in a reply, or None."""
    number = extract_last_number(text)
    if number is None or "." in number:
        return None
    return int(number.replace(",", ""))


class GuessNumberEnv(Env):
    """One game; the conversation so far is the observation at every turn."""

    def __init__(self, game: Game, renderer: Renderer) -> None:
        self.game = game
        self.renderer = renderer
        self.messages: list[Message] = [game.intro()]
        self.turns = 0

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        return self.renderer.build_generation_prompt(self.messages), self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        message, parsed = self.renderer.parse_response(action)
        guess = read_guess(message["content"])
        self.turns += 1
        self.messages.append(Message(role="assistant", content=message["content"]))
        won = guess == self.game.secret
        done = won or self.turns >= self.game.max_turns
        metrics = {"valid_guess": float(guess is not None and 1 <= guess <= self.game.max_number)}
        if done:
            metrics.update({"won": float(won), "turns_used": float(self.turns)})
            next_observation = ModelInput.empty()
        else:
            self.messages.append(Message(role="user", content=self.game.feedback(guess)))
            next_observation = self.renderer.build_generation_prompt(self.messages)
        return StepResult(
            reward=float(won),
            episode_done=done,
            next_observation=next_observation,
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics=metrics,
            parse_ok=parsed and guess is not None,
        )


@dataclass(frozen=True)
class GuessNumberGroupBuilder(EnvGroupBuilder):
    """`group_size` games with the same secret."""

    game: Game
    renderer: Renderer
    group_size: int

    async def make_envs(self) -> list[GuessNumberEnv]:
        return [GuessNumberEnv(self.game, self.renderer) for _ in range(self.group_size)]

    def logging_tags(self) -> list[str]:
        return ["guess_number"]


class GuessNumberDataset(RLDataset):
    """`num_batches` batches of `groups_per_batch` games with seeded random secrets."""

    def __init__(
        self, renderer: Renderer, num_batches: int, groups_per_batch: int, group_size: int, game: Game, seed: int
    ) -> None:
        self.renderer = renderer
        self.num_batches = num_batches
        self.groups_per_batch = groups_per_batch
        self.group_size = group_size
        self.game = game
        self.seed = seed

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        rng = random.Random(f"guess_number/{self.seed}/{index}")
        return [
            GuessNumberGroupBuilder(
                Game(rng.randint(1, self.game.max_number), self.game.max_number, self.game.max_turns),
                self.renderer,
                self.group_size,
            )
            for _ in range(self.groups_per_batch)
        ]

    def __len__(self) -> int:
        return self.num_batches


@dataclass(frozen=True)
class TeacherGames:
    """Demonstration games by a teacher who obeys every hint: with probability `bisect_rate` a
    guess halves the numbers still possible (binary search), otherwise it is any of them at
    random. An imitating model inherits the random guesses, which lose games that binary
    search would win; RL can unlearn them."""

    max_number: int
    max_turns: int
    bisect_rate: float

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        return [self._game(rng) for _ in range(count)]

    def _game(self, rng: random.Random) -> list[Message]:
        game = Game(rng.randint(1, self.max_number), self.max_number, self.max_turns)
        low, high = 1, self.max_number
        messages = [game.intro()]
        for _ in range(self.max_turns):
            guess = (low + high) // 2 if rng.random() < self.bisect_rate else rng.randint(low, high)
            messages.append(Message(role="assistant", content=str(guess)))
            if guess == game.secret:
                break
            if guess < game.secret:
                low = guess + 1
            else:
                high = guess - 1
            messages.append(Message(role="user", content=game.feedback(guess)))
        if messages[-1]["role"] == "user":
            messages.pop()  # end on the player's last guess
        return messages


def guess_number_task(
    renderer: Renderer,
    *,
    num_batches: int,
    groups_per_batch: int,
    group_size: int,
    max_number: int,
    max_turns: int,
    seed: int,
    teacher_bisect_rate: float = 0.0,
    eval_games: int = 8,
) -> RLTask:
    template = Game(1, max_number, max_turns)
    return RLTask(
        train=GuessNumberDataset(renderer, num_batches, groups_per_batch, group_size, template, seed),
        eval_builders=[
            GuessNumberGroupBuilder(Game(secret, max_number, max_turns), renderer, eval_games)
            for secret in range(1, max_number + 1)
        ],
        demonstrations=TeacherGames(max_number, max_turns, teacher_bisect_rate),
    )


class GuessNumberSettings(EnvSettings):
    name: Literal["guess_number"] = Field("guess_number", description="guess a number from higher/lower hints")
    max_number: int = Field(10, ge=1, description="the secret is drawn from [1, max_number]")
    max_turns: int = Field(4, ge=1, description="guesses per game")
    teacher_bisect_rate: float = Field(
        0.5, ge=0, le=1, description="share of warm-start guesses that halve the range (the rest are random)"
    )
    eval_games: int = Field(
        32, ge=1, description="held-out games per secret: 32 x 10 secrets puts the win rate's standard error near 0.025"
    )


def build_guess_number_task(settings: GuessNumberSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    return guess_number_task(
        renderer,
        num_batches=config.rl.num_batches,
        groups_per_batch=config.rl.groups_per_batch,
        group_size=config.rl.group_size,
        max_number=settings.max_number,
        max_turns=settings.max_turns,
        seed=config.seed,
        teacher_bisect_rate=settings.teacher_bisect_rate,
        eval_games=settings.eval_games,
    )


ENV = EnvSpec("multi-turn: guess a number from higher/lower hints", GuessNumberSettings, build_guess_number_task)
