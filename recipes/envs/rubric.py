"""Rubric rewards: each prompt carries a score rubric, the policy replies once, and a grader model
scores the reply against the rubric (`recipes.envs.rubric_grading`); the reward is the score
mapped to [0, 1], `(score - 1) / 4` (a grader output with no score counts as score 1 and is
logged as `grade_unparsed`).

Data is in the Feedback-Collection format (prometheus-eval/Feedback-Collection), JSONL, one record
per graded response: `orig_instruction` (what the policy is asked), `orig_criteria` and
`orig_score1_description` .. `orig_score5_description` (the rubric), an optional
`orig_reference_answer` (a reply that scores 5); `orig_response` with its `orig_score`, where
present, is a warm-start demonstration (those scored at least `env.demonstration_min_score`).
Records with the same instruction, rubric and reference are one prompt. The grader's
`output`s in the file are not read: grades come from the run's grader.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from kitchen import RESUME_SAFE, DataError, Section, build_all
from kitchen.families.rl import RLSettings
from recipes.data import shipped_data
from recipes.envs.rubric_grading import GraderSettings, GradingItem, Rubric, RubricGrader
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.model_slot import ModelSlot
from train_core.rl.task import RLTask
from train_core.rl.types import Action, Env, EnvGroupBuilder, Metrics, RLDataset, StepResult, Trajectory
from train_core.types import ModelInput, StopCondition

DESCRIPTION_KEYS = tuple(f"orig_score{score}_description" for score in range(1, 6))
REQUIRED_KEYS = ("orig_instruction", "orig_criteria", *DESCRIPTION_KEYS)


@dataclass(frozen=True)
class RubricRecord:
    """One Feedback-Collection record: a prompt with its rubric, and perhaps a graded response."""

    instruction: str
    rubric: Rubric
    reference: str | None
    response: str | None
    score: int | None


def rubric_record(where: str, record: Any) -> RubricRecord:
    """One record; a bad one is a DataError naming `where` (file and line) and the key."""
    for key in REQUIRED_KEYS:
        if not isinstance(record.get(key), str) or not record[key].strip():
            raise DataError(f"{where}: '{key}' must be a non-empty string (Feedback-Collection format)")
    for key in ("orig_reference_answer", "orig_response"):
        if record.get(key) is not None and not isinstance(record[key], str):
            raise DataError(f"{where}: '{key}' must be a string")
    score = record.get("orig_score")
    if score is not None:
        if isinstance(score, str) and score.strip().isdigit():
            score = int(score)  # some copies of the data set store it as text
        if isinstance(score, bool) or not isinstance(score, int) or not 1 <= score <= 5:
            raise DataError(f"{where}: 'orig_score' must be an integer from 1 to 5, got {record['orig_score']!r}")
    descriptions = tuple(record[key].strip() for key in DESCRIPTION_KEYS)
    reference = record.get("orig_reference_answer")
    return RubricRecord(
        record["orig_instruction"].strip(),
        Rubric(record["orig_criteria"].strip(), descriptions),
        reference.strip() or None if isinstance(reference, str) else None,
        record.get("orig_response"),
        score,
    )


@dataclass(frozen=True)
class RubricPrompt:
    """A prompt the policy answers, with what the grader grades it by."""

    instruction: str
    rubric: Rubric
    reference: str | None
    demonstrations: tuple[tuple[str, int | None], ...]
    """Graded responses from the file: (response, its score or None)."""


def load_rubric_prompts(path: str) -> list[RubricPrompt]:
    """The prompts of a Feedback-Collection file, in file order, each with its graded responses."""
    grouped: dict[tuple[str, Rubric, str | None], list[tuple[str, int | None]]] = {}
    for record in build_all(path, rubric_record):
        responses = grouped.setdefault((record.instruction, record.rubric, record.reference), [])
        if record.response is not None:
            responses.append((record.response, record.score))
    if not grouped:
        raise DataError(f"{path}: no records")
    return [RubricPrompt(*key, tuple(responses)) for key, responses in grouped.items()]


class RubricSettings(Section):
    """Config section `env`: the prompts with their rubrics."""

    dataset: str = Field(
        shipped_data("rubric/feedback.jsonl"), description="prompts with rubrics: Feedback-Collection JSONL"
    )
    eval_dataset: str | None = Field(
        None,
        description="held-out prompts (Feedback-Collection JSONL); none = the training prompts",
        json_schema_extra=RESUME_SAFE,
    )
    demonstration_min_score: int = Field(
        1, ge=1, le=5, description="warm start: imitate the file's responses scored at least this"
    )


class RubricEnv(Env):
    """One prompt, one reply; the group grades the replies together (`RubricGroup`)."""

    def __init__(self, prompt: RubricPrompt, renderer: Renderer) -> None:
        self.prompt, self.renderer = prompt, renderer
        self.reply: str | None = None

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        messages = [Message(role="user", content=self.prompt.instruction)]
        return self.renderer.build_generation_prompt(messages), self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        message, parsed = self.renderer.parse_response(action)
        self.reply = str(message["content"])
        return StepResult(0.0, True, ModelInput.empty(), self.renderer.get_stop_sequences(), parse_ok=parsed)


@dataclass(frozen=True)
class RubricGroup(EnvGroupBuilder):
    prompt: RubricPrompt
    renderer: Renderer
    grader: RubricGrader
    group_size: int
    tag: str

    async def make_envs(self) -> list[RubricEnv]:
        return [RubricEnv(self.prompt, self.renderer) for _ in range(self.group_size)]

    async def compute_group_rewards(
        self, trajectories_G: Sequence[Trajectory], envs_G: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        """The group's replies graded in one request; an episode a limit stopped before it replied
        gets 0."""
        replies = [env.reply if isinstance(env, RubricEnv) else None for env in envs_G]
        p = self.prompt
        items = [GradingItem(p.instruction, p.rubric, p.reference, reply) for reply in replies if reply is not None]
        grades = iter(await self.grader.grade(items))
        out: list[tuple[float, Metrics]] = []
        for reply in replies:
            if reply is None:
                out.append((0.0, {}))
                continue
            grade, cached = next(grades)
            score = grade.score or 1
            metrics = {
                "grade": float(score),
                "grade_unparsed": float(grade.score is None),
                "grade_cached": float(cached),
            }
            out.append(((score - 1) / 4, metrics))
        return out

    def logging_tags(self) -> list[str]:
        return [self.tag]


@dataclass(frozen=True)
class RubricDataset(RLDataset):
    """`num_batches` batches of `groups_per_batch` prompts: a seeded shuffle per epoch."""

    prompts: Sequence[RubricPrompt]
    make: Any
    num_batches: int
    groups_per_batch: int
    seed: int

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        out = []
        for position in range(index * self.groups_per_batch, (index + 1) * self.groups_per_batch):
            epoch, offset = divmod(position, len(self.prompts))
            order = list(range(len(self.prompts)))
            random.Random(f"rubric/{self.seed}/{epoch}").shuffle(order)
            out.append(self.make(self.prompts[order[offset]]))
        return out

    def __len__(self) -> int:
        return self.num_batches


@dataclass(frozen=True)
class GradedDemonstrations:
    """Graded responses of the file as replies: (instruction, response) pairs."""

    pairs: Sequence[tuple[str, str]]

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        chosen = [rng.choice(self.pairs) for _ in range(count)]
        return [
            [Message(role="user", content=instruction), Message(role="assistant", content=response)]
            for instruction, response in chosen
        ]


def demonstrations(prompts: Sequence[RubricPrompt], min_score: int) -> GradedDemonstrations | None:
    """The responses scored at least `min_score` (unscored ones too), or None where there are none."""
    pairs = [
        (p.instruction, response)
        for p in prompts
        for response, score in p.demonstrations
        if score is None or score >= min_score
    ]
    return GradedDemonstrations(pairs) if pairs else None


def check_rubric_data(settings: RubricSettings) -> None:
    """The prompt files, read before anything starts (a DataError names file, line and key)."""
    for path in (settings.dataset, settings.eval_dataset):
        if path is not None:
            load_rubric_prompts(path)


def rubric_task(
    settings: RubricSettings, grader_settings: GraderSettings, config: RLSettings, renderer: Renderer
) -> RLTask:
    """The task: the prompts, one grader (and its cache) for training and evaluation, and the
    grader's model slot unless a rule grades."""
    train = load_rubric_prompts(settings.dataset)
    held_out = load_rubric_prompts(settings.eval_dataset) if settings.eval_dataset else train
    model = grader_settings.model
    slot = None if grader_settings.rule is not None else ModelSlot("grader", model.model_name, model.checkpoint)
    grader = RubricGrader(grader_settings, renderer, slot)

    def group(tag: str) -> Any:
        return lambda prompt: RubricGroup(prompt, renderer, grader, config.rl.group_size, tag)

    return RLTask(
        train=RubricDataset(train, group("rubric"), config.rl.num_batches, config.rl.groups_per_batch, config.seed),
        eval_builders=[group("eval")(prompt) for prompt in held_out],
        demonstrations=demonstrations(train, settings.demonstration_min_score),
        models=[slot] if slot is not None else [],
    )
