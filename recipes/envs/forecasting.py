"""Forecasting: the policy answers a yes/no question about an uncertain event with a probability,
and is rewarded by the Brier score against how the event resolved (`reward = -(p - outcome)^2`;
an answer with no probability in [0, 1] scores -1, the worst Brier score). The Brier score is
proper, so the reward is highest on average for the honest probability.

Questions are generated (a marble drawn from a bag of known colours, so the right probability is
known and the outcome is drawn from it), or read from a JSONL file of resolved questions,
`{"question": "...", "outcome": 0 or 1}` (an optional `probability` is a demonstration for the
warm start). The held-out questions are scored as one set: their calibration (ECE, the Brier
score's reliability / resolution / uncertainty, `train_core.calibration`) is logged with the reward.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from kitchen import RESUME_SAFE, DataError, build_all
from kitchen.families.rl import EnvSettings, EnvSpec, RLSettings
from train_core.calibration import brier, calibration
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.task import RLTask
from train_core.rl.types import Action, Env, EnvGroupBuilder, Metrics, RLDataset, StepResult, Trajectory
from train_core.types import ModelInput, StopCondition

COLOURS = ("red", "blue", "green", "white")
INSTRUCTION = "Answer with a probability from 0 to 1."


@dataclass(frozen=True)
class Question:
    text: str
    outcome: float
    probability: float | None = None
    """The right probability where it is known (generated questions), for the warm start."""


def marble_question(rng: random.Random, bag_size: int) -> Question:
    """A bag of `bag_size` marbles, `k` of them of one colour; will a drawn marble be that colour?"""
    colour, other = rng.sample(COLOURS, 2)
    k = rng.randint(0, bag_size)
    text = f"A bag has {k} {colour} and {bag_size - k} {other} marbles. One is drawn. Is it {colour}? {INSTRUCTION}"
    probability = k / bag_size
    return Question(text, float(rng.random() < probability), probability)


NUMBER = re.compile(r"(\d*\.\d+|\d+)\s*(%?)")


def read_probability(text: str) -> float | None:
    """The last number in a reply as a probability (`0.3`, `.3`, `30%`), or None outside [0, 1]."""
    found = NUMBER.findall(text)
    if not found:
        return None
    number, percent = found[-1]
    value = float(number) / (100.0 if percent else 1.0)
    return value if 0.0 <= value <= 1.0 else None


class ForecastEnv(Env):
    """One question, one probability."""

    def __init__(self, question: Question, renderer: Renderer) -> None:
        self.question, self.renderer = question, renderer
        self.forecast: float | None = None

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        prompt = self.renderer.build_generation_prompt([Message(role="user", content=self.question.text)])
        return prompt, self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        message, parsed = self.renderer.parse_response(action)
        self.forecast = read_probability(message["content"])
        valid = self.forecast is not None
        score = brier(self.forecast, self.question.outcome) if self.forecast is not None else 1.0
        return StepResult(
            reward=-score,
            episode_done=True,
            next_observation=ModelInput.empty(),
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={"brier": score, "valid_forecast": float(valid)},
            parse_ok=parsed and valid,
        )


@dataclass(frozen=True)
class ForecastGroup(EnvGroupBuilder):
    """One env per question: a training group holds `group_size` copies of one question; the
    held-out group holds every held-out question once and logs their calibration as a set."""

    questions: Sequence[Question]
    renderer: Renderer
    tag: str
    num_bins: int = 10
    calibrate: bool = False

    async def make_envs(self) -> list[ForecastEnv]:
        return [ForecastEnv(question, self.renderer) for question in self.questions]

    async def compute_group_rewards(
        self, trajectories_G: Sequence[Trajectory], envs_G: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        if not self.calibrate:
            return [(0.0, {}) for _ in envs_G]
        scored = [env for env in envs_G if isinstance(env, ForecastEnv) and env.forecast is not None]
        if not scored:
            return [(0.0, {}) for _ in envs_G]
        forecasts = [env.forecast for env in scored if env.forecast is not None]
        result = calibration(forecasts, [env.question.outcome for env in scored], self.num_bins)
        metrics = result.as_metrics("calibration/")
        return [(0.0, dict(metrics)) for _ in envs_G]

    def logging_tags(self) -> list[str]:
        return [self.tag]


@dataclass(frozen=True)
class ForecastDataset(RLDataset):
    """Batches of `groups_per_batch` questions: generated anew per batch, or a seeded shuffle of a file's."""

    questions: Sequence[Question] | None
    renderer: Renderer
    num_batches: int
    groups_per_batch: int
    group_size: int
    bag_size: int
    seed: int

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        rng = random.Random(f"forecasting/{self.seed}/{index}")
        if self.questions is None:
            drawn = [marble_question(rng, self.bag_size) for _ in range(self.groups_per_batch)]
        else:
            drawn = [rng.choice(self.questions) for _ in range(self.groups_per_batch)]
        return [ForecastGroup([q] * self.group_size, self.renderer, "forecasting") for q in drawn]

    def __len__(self) -> int:
        return self.num_batches


@dataclass(frozen=True)
class TeacherForecasts:
    """Demonstrations: the right probability, except `error_rate` of the time a random one (in
    tenths), which an imitating model inherits and RL, rewarded by the Brier score, unlearns."""

    questions: Sequence[Question] | None
    bag_size: int
    error_rate: float

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        out = []
        for _ in range(count):
            question = marble_question(rng, self.bag_size) if self.questions is None else rng.choice(self.questions)
            assert question.probability is not None
            answer = question.probability if rng.random() >= self.error_rate else rng.randint(0, 10) / 10
            out.append([Message(role="user", content=question.text), Message(role="assistant", content=f"{answer:g}")])
        return out


def resolved_question(where: str, record: Any) -> Question:
    """One resolved question; a bad record is a DataError naming `where` (file and line)."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected an object with 'question' and 'outcome'")
    question, outcome, probability = record.get("question"), record.get("outcome"), record.get("probability")
    if not isinstance(question, str) or isinstance(outcome, bool) or outcome not in (0, 1):
        raise DataError(f"{where}: a forecasting record needs a string 'question' and an 'outcome' of 0 or 1")
    if probability is not None and (
        isinstance(probability, bool) or not isinstance(probability, int | float) or not 0 <= probability <= 1
    ):
        raise DataError(f"{where}: 'probability' must be a number in [0, 1]")
    return Question(question, float(outcome), None if probability is None else float(probability))


def load_questions(path: str) -> Sequence[Question]:
    questions = build_all(path, resolved_question)
    if len(questions) == 0:
        raise DataError(f"{path}: no questions")
    return questions


class ForecastingSettings(EnvSettings):
    name: Literal["forecasting"] = Field("forecasting", description="yes/no questions answered with a probability")
    dataset: str | None = Field(None, description="resolved questions (JSONL: question, outcome); none = generated")
    eval_dataset: str | None = Field(
        None, description="held-out resolved questions; none = generated", json_schema_extra=RESUME_SAFE
    )
    bag_size: int = Field(4, ge=1, le=100, description="generated questions: marbles in the bag")
    num_eval_questions: int = Field(200, ge=1, description="generated held-out questions")
    num_bins: int = Field(10, ge=1, le=100, description="probability bins of the calibration metrics")
    teacher_error_rate: float = Field(
        0.5, ge=0, le=1, description="share of warm-start forecasts that are random instead of right"
    )


def check_files(settings: ForecastingSettings, roles: frozenset[str]) -> None:
    for path in (settings.dataset, settings.eval_dataset):
        if path:
            load_questions(path)


def build_task(settings: ForecastingSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    train = load_questions(settings.dataset) if settings.dataset else None
    if settings.eval_dataset:
        held_out = load_questions(settings.eval_dataset)
    else:
        rng = random.Random(f"forecasting/eval/{config.seed}")
        held_out = [marble_question(rng, settings.bag_size) for _ in range(settings.num_eval_questions)]
    known = None if train is None else [q for q in train if q.probability is not None]
    demonstrations: Any = None
    if train is None or known:
        demonstrations = TeacherForecasts(known, settings.bag_size, settings.teacher_error_rate)
    return RLTask(
        train=ForecastDataset(
            train,
            renderer,
            config.rl.num_batches,
            config.rl.groups_per_batch,
            config.rl.group_size,
            settings.bag_size,
            config.seed,
        ),
        eval_builders=[ForecastGroup(held_out, renderer, "forecasting", settings.num_bins, calibrate=True)],
        demonstrations=demonstrations,
    )


ENV = EnvSpec(
    "yes/no questions answered with a probability, rewarded by the Brier score",
    ForecastingSettings,
    build_task,
    check_files,
)
