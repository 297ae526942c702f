"""The `reward_fn` environment: RL without writing an env. A prompt data set and one or more
reward functions named as `module:function` or by a registered name (TRL's `reward_funcs`,
`kitchen.families.rl.rewards`): each prompt is answered `group_size` times and each reply scored by
`fn(prompt, completion, record)`; scores are numbers, or dicts of named numbers summed with
`reward_weights`; with `process_reward`, a trained PRM's step-by-step score too
(`kitchen.families.rl.process_reward`). Runs in every RL mode; the `reward_fn_rl` recipe trains
on it, `env_rl` too.

Records: `{"prompt": "..."}` (one user message), `{"prompt": [{role, content}, ...]}` or
`{"messages": [...]}` (chat format); any other keys (e.g. a reference `answer`) reach the reward
function in `record`. An optional string `completion` per record is a demonstration for the warm
start.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

from pydantic import Field, ValidationInfo, field_validator, model_validator

from kitchen.engine.config.loading import config_dir
from kitchen.engine.config.sections import RESUME_SAFE
from kitchen.engine.errors import DataError
from kitchen.engine.runs.datasets import is_hub_name, load_located_records, prompt_key, prompt_messages
from kitchen.families.rl.envs import EnvSettings, EnvSpec
from kitchen.families.rl.process_reward import SCORE_NAME, ProcessRewardFn, ProcessRewardScorer, process_reward_slot
from kitchen.families.rl.rewards import Completion, RewardFn, resolve_reward_fns, score_group, weighted_total
from kitchen.families.rl.settings import RLSettings
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.task import RLTask
from train_core.rl.types import Action, Env, EnvGroupBuilder, Metrics, RLDataset, StepResult, Trajectory
from train_core.types import ModelInput, StopCondition


class RewardFnSettings(EnvSettings):
    """The `reward_fn` environment's settings: the prompts and the functions that score replies."""

    name: Literal["reward_fn"] = Field("reward_fn", description="prompts scored by reward functions")
    dataset: str = Field(..., description="prompts: JSONL / JSON / parquet, or a hub dataset name")
    eval_dataset: str | None = Field(
        None, description="held-out prompts; none = no eval", json_schema_extra=RESUME_SAFE
    )
    split: str = Field("train", description="hub datasets: the split to read")
    reward_fn: list[str] = Field(
        default_factory=list,
        description="reward functions: registered names (kitchen.rewards) or module:function; one, or a list",
    )
    process_reward: ProcessRewardFn | None = Field(
        None, description="also score each reply step by step with a trained process reward model (prm)"
    )
    reward_weights: dict[str, float] = Field(default_factory=dict, description="weight of each named score (default 1)")

    @field_validator("reward_fn", mode="before")
    @classmethod
    def _one_or_more(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("reward_fn")
    @classmethod
    def _importable(cls, specs: list[str], info: ValidationInfo) -> list[str]:
        resolve_reward_fns(specs, config_dir(info))  # a ValueError names what cannot be imported
        return specs

    @model_validator(mode="after")
    def _weights_name_scores(self) -> RewardFnSettings:
        if not self.reward_fn and self.process_reward is None:
            raise ValueError("reward_fn: name at least one reward function (module:function), or set process_reward")
        fns = resolve_reward_fns(self.reward_fn)
        if all(not _returns_dict(fn) for fn in fns):
            names = {fn.name for fn in fns} | ({SCORE_NAME} if self.process_reward else set())
            unknown = sorted(set(self.reward_weights) - names)
            if unknown:
                raise ValueError(f"reward_weights names {unknown[0]!r}; the reward functions are {sorted(names)}")
        return self


def _returns_dict(fn: RewardFn) -> bool:
    """Whether the function may return a dict (its annotation says so, or it has none)."""
    annotation = getattr(fn.fn, "__annotations__", {}).get("return")
    return annotation is None or "dict" in str(annotation).lower() or "mapping" in str(annotation).lower()


@dataclass(frozen=True)
class PromptRecord:
    record: dict[str, Any]
    prompt: Any
    messages: list[Message]


class PromptRecords(Sequence[PromptRecord]):
    """The records at `kept` (all by default) of a prompt file, each made a PromptRecord when
    asked for: a JSONL file streams from its cache, so memory does not grow with the file."""

    def __init__(
        self, located: Sequence[tuple[str, Any]], roles: frozenset[str], kept: Sequence[int] | None = None
    ) -> None:
        self.located, self.roles = located, roles
        self.kept = range(len(located)) if kept is None else kept

    def __len__(self) -> int:
        return len(self.kept)

    @overload
    def __getitem__(self, index: int) -> PromptRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[PromptRecord]: ...

    def __getitem__(self, index: int | slice) -> PromptRecord | list[PromptRecord]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        where, record = self.located[self.kept[index]]
        return PromptRecord(dict(record), record[prompt_key(record)], prompt_messages(record, where, self.roles))

    def with_completions(self) -> PromptRecords | None:
        """The records that hold a string `completion` (for the warm start), or None."""
        kept = array("q", (i for i in self.kept if isinstance(self.located[i][1].get("completion"), str)))
        return PromptRecords(self.located, self.roles, kept) if kept else None


def load_prompt_records(source: str, split: str, roles: frozenset[str]) -> PromptRecords:
    """Each record with its prompt as the reward function sees it (text, or messages) and as the
    policy sees it; a bad record is a DataError naming its file and line (all checked here)."""
    located = load_located_records(source, split=split)
    for where, record in located:
        prompt_messages(record, where, roles)
    if not located:
        raise DataError(f"{source}: no records")
    return PromptRecords(located, roles)


def check_prompts(settings: RewardFnSettings, roles: frozenset[str]) -> None:
    """The local prompt files' records (messages of the renderer's `roles`), before anything starts."""
    for source in (settings.dataset, settings.eval_dataset):
        if source and not is_hub_name(source):
            load_prompt_records(source, settings.split, roles)


class RewardFnEnv(Env):
    """One prompt, one reply; the group scores the replies (`RewardFnGroup.compute_group_rewards`),
    so batched reward functions see them all at once."""

    def __init__(self, item: PromptRecord, renderer: Renderer) -> None:
        self.item, self.renderer = item, renderer
        self.completion: Completion | None = None

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        return self.renderer.build_generation_prompt(self.item.messages), self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        message, parsed = self.renderer.parse_response(action)
        self.completion = Completion(message["content"], list(action))
        return StepResult(
            reward=0.0,
            episode_done=True,
            next_observation=ModelInput.empty(),
            next_stop_condition=self.renderer.get_stop_sequences(),
            parse_ok=parsed,
        )


@dataclass(frozen=True)
class RewardFnGroup(EnvGroupBuilder):
    item: PromptRecord
    renderer: Renderer
    fns: Sequence[RewardFn]
    weights: Mapping[str, float]
    group_size: int
    tag: str

    async def make_envs(self) -> list[RewardFnEnv]:
        return [RewardFnEnv(self.item, self.renderer) for _ in range(self.group_size)]

    async def compute_group_rewards(
        self, trajectories_G: Sequence[Trajectory], envs_G: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        """Each reply's weighted score (an episode a limit stopped before it replied gets 0)."""
        replied = [env.completion for env in envs_G if isinstance(env, RewardFnEnv) and env.completion is not None]
        scores = iter(await score_group(self.fns, self.item.prompt, replied, self.item.record))
        optional = [fn.name for fn in self.fns if fn.batched]
        out: list[tuple[float, Metrics]] = []
        for env in envs_G:
            if not isinstance(env, RewardFnEnv) or env.completion is None:
                out.append((0.0, {}))
                continue
            named = next(scores)
            metrics: Metrics = {f"score/{name}": value for name, value in named.items()}
            out.append((weighted_total(named, self.weights, optional), metrics))
        return out

    def logging_tags(self) -> list[str]:
        return [self.tag]


@dataclass(frozen=True)
class PromptDataset(RLDataset):
    """Batches of `groups_per_batch` prompts: a seeded shuffle per epoch, wrapping around."""

    items: Sequence[PromptRecord]
    make: Any
    groups_per_batch: int
    seed: int

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self.items)))
        random.Random(f"reward_fn/{self.seed}/{epoch}").shuffle(order)
        return order

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        start = index * self.groups_per_batch
        out = []
        orders: dict[int, list[int]] = {}
        for position in range(start, start + self.groups_per_batch):
            epoch, offset = divmod(position, len(self.items))
            order = orders.setdefault(epoch, self._order(epoch))
            out.append(self.make(self.items[order[offset]]))
        return out

    def __len__(self) -> int:
        return max(1, len(self.items) // self.groups_per_batch)


@dataclass(frozen=True)
class CompletionDemonstrations:
    """The records' `completion`s as replies, for the warm start."""

    items: Sequence[PromptRecord]

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        out = []
        for _ in range(count):
            item = rng.choice(self.items)
            out.append([*item.messages, Message(role="assistant", content=str(item.record["completion"]))])
        return out


def build_task(settings: RewardFnSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    fns = resolve_reward_fns(settings.reward_fn)
    models = []
    if settings.process_reward is not None:
        slot = process_reward_slot(settings.process_reward)
        fns.append(RewardFn(SCORE_NAME, ProcessRewardScorer(slot, renderer.tokenizer, settings.process_reward)))
        models.append(slot)
    weights = dict(settings.reward_weights)
    train = load_prompt_records(settings.dataset, settings.split, renderer.roles)

    def group(tag: str) -> Any:
        return lambda item: RewardFnGroup(item, renderer, fns, weights, config.rl.group_size, tag)

    held_out = (
        load_prompt_records(settings.eval_dataset, settings.split, renderer.roles) if settings.eval_dataset else []
    )
    demos = train.with_completions()
    return RLTask(
        train=PromptDataset(train, group("prompts"), config.rl.groups_per_batch, config.seed),
        eval_builders=[group("eval")(item) for item in held_out],
        demonstrations=CompletionDemonstrations(demos) if demos is not None else None,
        models=models,
    )


REWARD_FN_ENV = EnvSpec(
    "prompts, each reply scored by reward functions (module:function or a registered name)",
    RewardFnSettings,
    build_task,
    check_prompts,
)
