"""Judges of a comparison inside a run, and the stages that put one in the run state: a rule (any
callable of prompt and two completions), a learned pairwise preference model (the `rlhf` recipe's
phase 2) or a Bradley-Terry reward model (the `rm` recipe) opened on a sampling client. A config
names its judge (`win_rate.judge`, online DPO's `judge.name`); `judge_setup` turns the name into
the stages, so every recipe picks judges the same way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kitchen.engine.config.sections import ConfigRef
from kitchen.engine.errors import ConfigError
from kitchen.engine.ports import SamplingClient, Tokenizer
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Node
from kitchen.families.common.completers import AsyncJudge, PreferenceModelJudge, RewardModelJudge, as_async_judge
from kitchen.families.common.settings import OtherModel
from kitchen.families.common.setup import OpenOtherModel
from kitchen.families.preference.bradley_terry import score_token_ids
from kitchen.families.preference.settings import SCORE_TOKENS, ComparisonFiles
from train_core.renderers.base import Renderer

PREFERENCE_MODEL = "preference_model"
"""A judge name: the learned pairwise preference model at the config's judge model."""
REWARD_MODEL = "reward_model"
"""A judge name: the Bradley-Terry reward model at the config's judge model."""
LEARNED_JUDGES = (PREFERENCE_MODEL, REWARD_MODEL)


@dataclass(frozen=True)
class JudgeOut:
    judge: AsyncJudge


class OpenModelJudge(Stage):
    """A `PreferenceModelJudge` on the sampling client in `judge_client` (opened by `OpenOtherModel`),
    as `judge` (`keys=` for other keys)."""

    async def run(self, judge_client: SamplingClient, renderer: Renderer, data: ComparisonFiles) -> JudgeOut:
        return JudgeOut(PreferenceModelJudge(judge_client, renderer, data.allow_tie))


class OpenRewardModelJudge(Stage):
    """A `RewardModelJudge` on the sampling client in `judge_client` (opened by `OpenOtherModel`
    on a reward model's checkpoint) scoring with `score_tokens`, as `judge`."""

    def __init__(self, score_tokens: tuple[str, str], name: str | None = None, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.score_tokens = score_tokens

    async def run(self, judge_client: SamplingClient, tokenizer: Tokenizer, renderer: Renderer) -> JudgeOut:
        return JudgeOut(RewardModelJudge(judge_client, renderer, score_token_ids(tokenizer, self.score_tokens)))


class ProvideJudge(Stage):
    """A ready judge (e.g. a rule) as `judge` (`keys=` for another key), made async."""

    def __init__(self, judge: Callable[..., Any], name: str | None = None, judge_key: str = "judge") -> None:
        super().__init__(name, keys={"judge": judge_key})
        self.judge = judge

    async def run(self) -> JudgeOut:
        return JudgeOut(as_async_judge(self.judge))


def judge_setup(
    name: str,
    model: ConfigRef[Any, OtherModel],
    model_of: OtherModel,
    rule: Callable[[str], Callable[..., Any]],
    judge_key: str = "judge",
    score_tokens: tuple[str, str] = SCORE_TOKENS,
) -> list[Node]:
    """The stages that put the judge called `name` in the run state as `judge_key`: a learned one
    (`preference_model`; `reward_model`, scoring with `score_tokens`) opened from the model `model`
    refers to (`model_of` is its value in this config: it must name a checkpoint or a model), else
    the rule `rule(name)`."""
    if name not in LEARNED_JUDGES:
        return [ProvideJudge(rule(name), f"provide_{judge_key}", judge_key=judge_key)]
    if not (model_of.checkpoint or model_of.model_name):
        raise ConfigError(f"judge {name} needs its judge model's checkpoint (or model_name)")
    client_key = f"{judge_key}_client"
    keys = {"judge_client": client_key, "judge": judge_key}
    opener: Stage = (
        OpenModelJudge(f"open_{judge_key}", keys=keys)
        if name == PREFERENCE_MODEL
        else OpenRewardModelJudge(score_tokens, f"open_{judge_key}", keys=keys)
    )
    return [OpenOtherModel(model, client_key, f"{client_key}_path", name=f"open_{judge_key}_model"), opener]
