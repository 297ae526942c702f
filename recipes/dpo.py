"""dpo: Direct Preference Optimization on comparison JSONL (kitchen's `comparisons` layout,
`hh_rlhf` transcripts or `ultrafeedback` message lists; see `train_core.preference.datasets`).

Defaults train the embedded tiny model on the shipped `polite_arithmetic` comparisons, offline,
in well under three minutes on two CPU cores. `win_rate.judge` also measures the policy's win rate
against the reference: a rule (see `recipes.judges`) or a learned judge at `win_rate.judge_model`.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from kitchen import ConfigRef, OptimizerSettings, Recipe, Workflow, defaults
from kitchen.families.preference import (
    ComparisonData,
    PreferenceSettings,
    WinRateSettings,
    judge_setup,
    preference_workflow,
)
from recipes.data import shipped_data
from recipes.judges import check_any_judge, get_judge


class WinRate(WinRateSettings):
    @field_validator("judge")
    @classmethod
    def _known_judge(cls, name: str | None) -> str | None:
        return check_any_judge(name)


@defaults(
    data=ComparisonData(
        dataset=shipped_data("preference/polite_arithmetic_train.jsonl"),
        eval_dataset=shipped_data("preference/polite_arithmetic_test.jsonl"),
        batch_size=16,
    ),
    optimizer=OptimizerSettings(learning_rate=1e-3),
)
class Config(PreferenceSettings):
    win_rate: WinRate = Field(default_factory=WinRate, description="the policy's win rate against the reference")


JUDGE_MODEL = ConfigRef(WinRateSettings, lambda win_rate: win_rate.judge_model)


def workflow(config: Config) -> Workflow:
    judge = config.win_rate.judge
    setup = [] if judge is None else judge_setup(judge, JUDGE_MODEL, config.win_rate.judge_model, get_judge)
    return preference_workflow(judge_setup=setup)


RECIPE = Recipe(
    name="dpo",
    description="Direct Preference Optimization on comparison data",
    config_cls=Config,
    workflow=workflow,
)
