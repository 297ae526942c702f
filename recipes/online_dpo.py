"""online_dpo: DPO on pairs sampled from the policy as it trains, labelled by a judge: a rule
(see `recipes.judges`), a learned pairwise preference model (`preference_model`, e.g. the
`rlhf` recipe's phase 2) or a Bradley-Terry reward model (`reward_model`, the `rm` recipe), the
learned ones at `judge.model`. Evaluations report the policy's win rate against the initial
policy by the same judge.

Prompts come from comparison files (their completions are not used); defaults sample the
shipped `polite_arithmetic` prompts and judge them with its rule.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from kitchen import ConfigRef, Node, OptimizerSettings, Recipe, Workflow, defaults
from kitchen.families.preference import (
    ComparisonData,
    JudgeSettings,
    OnlineDPOSettings,
    WinRateSettings,
    judge_setup,
    online_dpo_workflow,
)
from recipes.data import shipped_data
from recipes.judges import check_any_judge, get_judge


class Judge(JudgeSettings):
    @field_validator("name")
    @classmethod
    def _known_judge(cls, name: str) -> str:
        return str(check_any_judge(name))


ONLINE_DEFAULTS = defaults(
    data=ComparisonData(
        dataset=shipped_data("preference/polite_arithmetic_train.jsonl"),
        eval_dataset=shipped_data("preference/polite_arithmetic_test.jsonl"),
        batch_size=16,
        max_length=128,
    ),
    optimizer=OptimizerSettings(learning_rate=1e-3),
    win_rate=WinRateSettings(prompts=32, max_tokens=24),
)
"""The online preference recipes' defaults (online_dpo, xpo, nash_md): the shipped
`polite_arithmetic` prompts, judged by its rule."""


@ONLINE_DEFAULTS
class Config(OnlineDPOSettings):
    judge: Judge = Field(
        default_factory=lambda: Judge(name="polite_arithmetic"), description="the judge that labels the sampled pairs"
    )


JUDGE_MODEL = ConfigRef(JudgeSettings, lambda judge: judge.model)


def judge_stages(judge: Judge) -> list[Node]:
    """The stages that provide `judge` (a rule, or a learned judge loaded from `judge.model`)."""
    return judge_setup(judge.name, JUDGE_MODEL, judge.model, get_judge, score_tokens=judge.score_tokens)


def workflow(config: Config) -> Workflow:
    return online_dpo_workflow(judge_setup=judge_stages(config.judge))


RECIPE = Recipe(
    name="online_dpo",
    description="Online DPO: pairs sampled from the policy, labelled by a rule or learned judge",
    config_cls=Config,
    workflow=workflow,
)
