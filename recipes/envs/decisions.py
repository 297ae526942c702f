"""Decisions: a prompt with lettered choices and a target probability distribution over them; the
policy answers one letter, and training moves its distribution over the choices toward the target.

Each choice has one reply, its letter as the renderer writes an assistant message (e.g. ` A`
then the end of turn); the policy's probability of a choice is read from its own logprobs of that
reply's letter tokens, and a reply naming choice `c` is rewarded `log target[c] - log p(reply)`: over
the replies that name a choice, its expectation under the policy is `-KL(p || target)`, so
policy-gradient training on it minimises that KL, whose only minimum is `p = target` (an
entropy-regularised objective: a plain reward such as `target[c]` would instead push all mass
onto the likeliest choice). Any other reply (another spelling included: its probability would not be the
choice's) gets the fixed reward `log env.floor`, with no `-log p` term: otherwise rare garbage
replies would earn an unbounded bonus. Logged per
group: `kl_to_target` (the sampled estimate of `KL(p || target)` over the replies that name a
choice), `tv_to_target` (total variation between the group's choice frequencies and the
target) and `valid_choice`.

Records (JSONL): `{"prompt": "...", "choices": ["...", ...], "target": [p, ...]}` (targets
summing to 1). The warm start imitates a teacher who answers from the target half of the time
(`env.teacher_target_share`) and uniformly otherwise.
"""

from __future__ import annotations

import math
import random
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from kitchen import RESUME_SAFE, DataError, build_all
from kitchen.families.rl import EnvSettings, EnvSpec, RLSettings
from recipes.data import shipped_data
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.renderers.train_on_what import TrainOnWhat
from train_core.rl.task import RLTask
from train_core.rl.types import Action, Env, EnvGroupBuilder, Metrics, RLDataset, StepResult, Trajectory
from train_core.types import ModelInput, StopCondition

LABELS = string.ascii_uppercase


@dataclass(frozen=True)
class Decision:
    prompt: str
    choices: tuple[str, ...]
    target: tuple[float, ...]

    @property
    def labels(self) -> str:
        return LABELS[: len(self.choices)]

    def question(self) -> str:
        lines = [f"{label}) {choice}" for label, choice in zip(self.labels, self.choices, strict=True)]
        return "\n".join([self.prompt, *lines, "Answer with one letter."])


def decision(where: str, record: Any) -> Decision:
    """One record; a bad one is a DataError naming `where` (file and line)."""
    if not isinstance(record, dict) or not isinstance(record.get("prompt"), str):
        raise DataError(f"{where}: expected an object with a string 'prompt', 'choices' and 'target'")
    choices, target = record.get("choices"), record.get("target")
    if (
        not isinstance(choices, list)
        or not 2 <= len(choices) <= len(LABELS)
        or not all(isinstance(c, str) for c in choices)
    ):
        raise DataError(f"{where}: 'choices' must be a list of 2 to {len(LABELS)} strings")
    if (
        not isinstance(target, list)
        or len(target) != len(choices)
        or not all(isinstance(t, int | float) and not isinstance(t, bool) and t >= 0 for t in target)
    ):
        raise DataError(f"{where}: 'target' must hold one probability >= 0 per choice ({len(choices)})")
    if not math.isclose(sum(target), 1.0, abs_tol=1e-6):
        raise DataError(f"{where}: 'target' must sum to 1, got {sum(target):g}")
    return Decision(record["prompt"], tuple(choices), tuple(float(t) for t in target))


def load_decisions(path: str) -> Sequence[Decision]:
    decisions = build_all(path, decision)
    if len(decisions) == 0:
        raise DataError(f"{path}: no records")
    return decisions


def choice_replies(renderer: Renderer, labels: str) -> list[list[int]]:
    """Each label's reply tokens as the renderer writes an assistant message holding just the
    label, without the end of turn (the suffix every label's reply shares)."""
    replies = []
    for label in labels:
        tokens, weights = renderer.build_supervised_example(
            [Message(role="user", content="?"), Message(role="assistant", content=label)],
            TrainOnWhat.LAST_ASSISTANT_MESSAGE,
        )
        replies.append([t for t, w in zip(tokens.to_ints(), weights, strict=True) if w > 0])
    shared = 0
    while shared < min(map(len, replies)) - 1 and len({tuple(r[len(r) - shared - 1 :]) for r in replies}) == 1:
        shared += 1
    return [reply[: len(reply) - shared] for reply in replies]


def read_choice(action: Sequence[int], replies: Sequence[Sequence[int]]) -> int | None:
    """The choice whose reply the action begins with (what follows it is the end of turn, or
    cut by `max_tokens`), or None."""
    for index, reply in enumerate(replies):
        if list(action[: len(reply)]) == list(reply):
            return index
    return None


def choice_logprob(trajectory: Trajectory, reply_length: int) -> float:
    """The policy's log-probability of the chosen reply, from the sampler's logprobs of its tokens."""
    return math.fsum(trajectory.transitions[-1].ac.logprobs[:reply_length])


class DecisionEnv(Env):
    """One prompt, one letter; rewarded with the group (it needs the reply's logprob)."""

    def __init__(self, item: Decision, renderer: Renderer, replies: Sequence[Sequence[int]]) -> None:
        self.item, self.renderer, self.replies = item, renderer, replies
        self.choice: int | None = None

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        prompt = self.renderer.build_generation_prompt([Message(role="user", content=self.item.question())])
        return prompt, self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        self.choice = read_choice(action, self.replies)
        return StepResult(
            reward=0.0,
            episode_done=True,
            next_observation=ModelInput.empty(),
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={"valid_choice": float(self.choice is not None)},
            parse_ok=self.choice is not None,
        )


def total_variation(counts: Counter[int], n: int, target: Sequence[float]) -> float:
    return 0.5 * sum(abs(counts.get(i, 0) / n - t) for i, t in enumerate(target))


@dataclass(frozen=True)
class DecisionGroup(EnvGroupBuilder):
    """`group_size` replies to one prompt, each rewarded `log target - log p` (module doc)."""

    item: Decision
    renderer: Renderer
    group_size: int
    floor: float
    tag: str = "decisions"

    async def make_envs(self) -> list[DecisionEnv]:
        replies = choice_replies(self.renderer, self.item.labels)
        return [DecisionEnv(self.item, self.renderer, replies) for _ in range(self.group_size)]

    async def compute_group_rewards(
        self, trajectories_G: Sequence[Trajectory], envs_G: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        replies = choice_replies(self.renderer, self.item.labels)
        choices = [env.choice if isinstance(env, DecisionEnv) else None for env in envs_G]
        rewards, gaps = [], []
        for trajectory, choice in zip(trajectories_G, choices, strict=True):
            if choice is None:
                rewards.append(math.log(self.floor))
                continue
            logprob = choice_logprob(trajectory, len(replies[choice]))
            gap = math.log(max(self.item.target[choice], self.floor)) - logprob
            rewards.append(gap)
            gaps.append(gap)
        counts = Counter(c for c in choices if c is not None)
        group: Metrics = {"tv_to_target": total_variation(counts, len(choices), self.item.target)}
        if gaps:
            group["kl_to_target"] = -sum(gaps) / len(gaps)
        return [(reward, dict(group)) for reward in rewards]

    def logging_tags(self) -> list[str]:
        return [self.tag]


@dataclass(frozen=True)
class DecisionDataset(RLDataset):
    """Batches of `groups_per_batch` prompts, a seeded shuffle per pass over the records."""

    items: Sequence[Decision]
    renderer: Renderer
    num_batches: int
    groups_per_batch: int
    group_size: int
    floor: float
    seed: int

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        out: list[EnvGroupBuilder] = []
        for position in range(index * self.groups_per_batch, (index + 1) * self.groups_per_batch):
            epoch, offset = divmod(position, len(self.items))
            order = list(range(len(self.items)))
            random.Random(f"decisions/{self.seed}/{epoch}").shuffle(order)
            out.append(DecisionGroup(self.items[order[offset]], self.renderer, self.group_size, self.floor))
        return out

    def __len__(self) -> int:
        return self.num_batches


@dataclass(frozen=True)
class TeacherChoices:
    """Warm-start demonstrations: each prompt answered with a letter drawn from its target
    `target_share` of the time, else uniformly. The imitating model learns the answer format and
    that the prompts differ, and starts between the uniform and the target distribution; RL,
    rewarded toward the target, closes the rest."""

    items: Sequence[Decision]
    target_share: float

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        out = []
        for _ in range(count):
            item = rng.choice(self.items)
            if rng.random() < self.target_share:
                reply = rng.choices(item.labels, weights=item.target)[0]
            else:
                reply = rng.choice(item.labels)
            out.append([Message(role="user", content=item.question()), Message(role="assistant", content=reply)])
        return out


DEFAULT_DATA = shipped_data("decisions/choices.jsonl")


class DecisionsSettings(EnvSettings):
    name: Literal["decisions"] = Field("decisions", description="a distribution over lettered choices")
    dataset: str = Field(DEFAULT_DATA, description="records: prompt, choices, target (JSONL)")
    eval_dataset: str | None = Field(
        None, description="held-out records; none = the training records", json_schema_extra=RESUME_SAFE
    )
    floor: float = Field(
        0.01,
        gt=0,
        lt=1,
        description="a reply naming no choice is rewarded log(floor); also the least target probability scored",
    )
    teacher_target_share: float = Field(
        0.5, ge=0, le=1, description="share of warm-start answers drawn from the target (the rest: uniform)"
    )


def check_files(settings: DecisionsSettings, roles: frozenset[str]) -> None:
    for path in (settings.dataset, settings.eval_dataset):
        if path:
            load_decisions(path)


def build_task(settings: DecisionsSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    items = load_decisions(settings.dataset)
    held_out = load_decisions(settings.eval_dataset) if settings.eval_dataset else items
    rl = config.rl
    return RLTask(
        train=DecisionDataset(
            items, renderer, rl.num_batches, rl.groups_per_batch, rl.group_size, settings.floor, config.seed
        ),
        eval_builders=[DecisionGroup(item, renderer, rl.group_size, settings.floor) for item in held_out],
        demonstrations=TeacherChoices(items, settings.teacher_target_share),
    )


ENV = EnvSpec(
    "a distribution over lettered choices, trained toward a target distribution",
    DecisionsSettings,
    build_task,
    check_files,
)
