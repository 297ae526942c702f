"""Twenty questions: the policy asks yes/no questions about a secret noun from a shipped list and
then names it; an answerer model, opened under its own name and only sampled (never trained),
answers each question knowing the secret. A reply that names a noun of the list is the guess and
ends the game: reward 1 if it is the secret, else 0; `env.max_turns` replies at most.

The list (`env.nouns`, JSONL): `{"noun": "cat", "answers": {"Is it an animal?": true, ...}}`.
The answers are what the warm start's teacher and the shipped answerer were taught; the answerer
in a run is whatever model `env.answerer` names, and the env passes it the secret and the
question only (`answerer_prompt`). The whole conversation is the policy's observation at every
turn, so a game trains as one datum (prefix merging).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from kitchen import DataError, OtherModel, build_all
from kitchen.families.rl import EnvSettings, EnvSpec, RLSettings
from recipes.data import shipped_data
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.model_slot import ModelSlot
from train_core.rl.task import RLTask
from train_core.rl.types import Action, Env, EnvGroupBuilder, RLDataset, StepResult
from train_core.types import ModelInput, SamplingParams, StopCondition

INTRO = "I am thinking of one of these: {nouns}. Ask yes/no questions, then guess it with 'Is it a ...?'."
UNCLEAR = "I can only answer yes or no."


@dataclass(frozen=True)
class Noun:
    noun: str
    answers: dict[str, bool]


def noun_record(where: str, record: Any) -> Noun:
    """One noun of the list; a bad record is a DataError naming `where` (file and line)."""
    answers = record.get("answers", {}) if isinstance(record, dict) else None
    if not isinstance(record, dict) or not isinstance(record.get("noun"), str) or not record["noun"].strip():
        raise DataError(f"{where}: expected an object with a non-empty string 'noun'")
    if not isinstance(answers, dict) or not all(isinstance(k, str) and isinstance(v, bool) for k, v in answers.items()):
        raise DataError(f"{where}: 'answers' must map questions to true / false")
    return Noun(record["noun"].strip().lower(), dict(answers))


def load_nouns(path: str) -> list[Noun]:
    nouns = list(build_all(path, noun_record))
    if len(nouns) < 2:
        raise DataError(f"{path}: twenty questions needs at least two nouns")
    return nouns


def answerer_prompt(secret: str, question: str) -> list[Message]:
    """What the answerer sees: the secret and one question, nothing of the game's history."""
    return [Message(role="user", content=f"The secret is {secret}. Answer yes or no. {question}")]


def read_answer(text: str) -> str:
    """The answerer's reply as the policy hears it: `Yes.`, `No.`, or that it could not tell."""
    word = re.match(r"\W*(\w+)", text)
    first = word.group(1).lower() if word else ""
    return {"yes": "Yes.", "no": "No."}.get(first, UNCLEAR)


def named_noun(text: str, nouns: Sequence[str]) -> str | None:
    """The last noun of the list a reply names (as a whole word), or None: a question."""
    found = [(m.start(), noun) for noun in nouns for m in re.finditer(rf"\b{re.escape(noun)}\b", text.lower())]
    return max(found)[1] if found else None


@dataclass(frozen=True)
class Game:
    secret: str
    nouns: tuple[str, ...]
    max_turns: int
    answers: dict[str, bool] = field(default_factory=dict, hash=False)
    """The list's answers for the secret (for the `answer_as_listed` metric)."""

    def intro(self) -> Message:
        return Message(role="user", content=INTRO.format(nouns=", ".join(self.nouns)))


class TwentyQuestionsEnv(Env):
    """One game; the conversation so far is the observation at every turn."""

    def __init__(self, game: Game, renderer: Renderer, answerer: ModelSlot, params: SamplingParams) -> None:
        self.game, self.renderer, self.answerer, self.params = game, renderer, answerer, params
        self.messages: list[Message] = [game.intro()]
        self.turns = 0

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        return self.renderer.build_generation_prompt(self.messages), self.renderer.get_stop_sequences()

    async def ask(self, question: str) -> str:
        prompt = self.renderer.build_generation_prompt(answerer_prompt(self.game.secret, question))
        sampled = await self.answerer.sample(prompt, self.params, self.renderer.get_stop_sequences())
        message, _ = self.renderer.parse_response(sampled.tokens)
        return read_answer(str(message["content"]))

    async def step(self, action: Action) -> StepResult:
        message, parsed = self.renderer.parse_response(action)
        text = str(message["content"])
        self.turns += 1
        self.messages.append(Message(role="assistant", content=text))
        guess = named_noun(text, self.game.nouns)
        stop = self.renderer.get_stop_sequences()
        if guess is None and self.turns < self.game.max_turns:
            answer = await self.ask(text)
            self.messages.append(Message(role="user", content=answer))
            metrics = {"clear_answer": float(answer != UNCLEAR)}
            listed = self.game.answers.get(text.strip())
            if listed is not None:  # a question of the list: did the answerer answer as the list does?
                metrics["answer_as_listed"] = float(answer == ("Yes." if listed else "No."))
            return StepResult(0.0, False, self.renderer.build_generation_prompt(self.messages), stop, metrics, parsed)
        won = guess == self.game.secret
        metrics = {"won": float(won), "guessed": float(guess is not None), "questions": float(self.turns - 1)}
        return StepResult(float(won), True, ModelInput.empty(), stop, metrics, parsed)


@dataclass(frozen=True)
class GameGroup(EnvGroupBuilder):
    """`group_size` games with the same secret."""

    game: Game
    renderer: Renderer
    answerer: ModelSlot
    params: SamplingParams
    group_size: int

    async def make_envs(self) -> list[TwentyQuestionsEnv]:
        return [
            TwentyQuestionsEnv(self.game, self.renderer, self.answerer, self.params) for _ in range(self.group_size)
        ]

    def logging_tags(self) -> list[str]:
        return ["twenty_questions"]


@dataclass(frozen=True)
class GameDataset(RLDataset):
    """`num_batches` batches of `groups_per_batch` games with seeded random secrets."""

    make: Any
    nouns: tuple[str, ...]
    num_batches: int
    groups_per_batch: int
    seed: int

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        rng = random.Random(f"twenty_questions/{self.seed}/{index}")
        return [self.make(rng.choice(self.nouns)) for _ in range(self.groups_per_batch)]

    def __len__(self) -> int:
        return self.num_batches


@dataclass(frozen=True)
class TeacherGames:
    """Demonstrations: a teacher asks the list's questions in order and hears the true answers,
    then names the noun they fit, except `error_rate` of the time any noun at random (an
    imitating model inherits those guesses; RL can unlearn them)."""

    nouns: Sequence[Noun]
    max_turns: int
    error_rate: float

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        names = tuple(n.noun for n in self.nouns)
        questions = list(self.nouns[0].answers)[: self.max_turns - 1]
        out = []
        for _ in range(count):
            secret = rng.choice(self.nouns)
            messages = [Game(secret.noun, names, self.max_turns).intro()]
            fits = list(self.nouns)
            for question in questions:
                answer = secret.answers.get(question, False)
                messages += [
                    Message(role="assistant", content=question),
                    Message(role="user", content="Yes." if answer else "No."),
                ]
                fits = [n for n in fits if n.answers.get(question, False) == answer]
            guess = rng.choice(fits).noun if rng.random() >= self.error_rate else rng.choice(names)
            out.append([*messages, Message(role="assistant", content=f"Is it a {guess}?")])
        return out


DEFAULT_NOUNS = shipped_data("twenty_questions/nouns.jsonl")
DEFAULT_ANSWERER = shipped_data("teachers/answerer")


class TwentyQuestionsSettings(EnvSettings):
    name: Literal["twenty_questions"] = Field("twenty_questions", description="ask yes/no questions, name the noun")
    nouns: str = Field(DEFAULT_NOUNS, description="the secret nouns (JSONL: noun, answers)")
    max_turns: int = Field(3, ge=1, le=40, description="policy replies per game, the guess included")
    answerer: OtherModel = Field(
        default_factory=lambda: OtherModel(checkpoint=DEFAULT_ANSWERER),
        description="the model that answers (sampled only); default: the shipped tiny answerer",
    )
    answerer_temperature: float = Field(0.0, ge=0, description="the answerer's sampling temperature (0: greedy)")
    answerer_max_tokens: int = Field(4, ge=1, description="the answerer's reply length in tokens")
    teacher_error_rate: float = Field(
        0.5, ge=0, le=1, description="share of warm-start guesses that are random instead of right"
    )


def check_nouns(settings: TwentyQuestionsSettings, roles: frozenset[str]) -> None:
    load_nouns(settings.nouns)


def build_task(settings: TwentyQuestionsSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    nouns = load_nouns(settings.nouns)
    names = tuple(n.noun for n in nouns)
    answers = {n.noun: n.answers for n in nouns}
    answerer = ModelSlot("answerer", settings.answerer.model_name, settings.answerer.checkpoint)
    params = SamplingParams(max_tokens=settings.answerer_max_tokens, temperature=settings.answerer_temperature)

    def group(secret: str) -> GameGroup:
        game = Game(secret, names, settings.max_turns, answers[secret])
        return GameGroup(game, renderer, answerer, params, config.rl.group_size)

    return RLTask(
        train=GameDataset(group, names, config.rl.num_batches, config.rl.groups_per_batch, config.seed),
        eval_builders=[group(name) for name in names],
        demonstrations=TeacherGames(nouns, settings.max_turns, settings.teacher_error_rate),
        models=[answerer],
    )


ENV = EnvSpec(
    "twenty questions: ask an answerer model yes/no questions about a secret noun, then name it",
    TwentyQuestionsSettings,
    build_task,
    check_nouns,
)
