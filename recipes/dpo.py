"""dpo: Direct Preference Optimization on comparison JSONL (kitchen's `comparisons` layout,
`hh_rlhf` transcripts or `ultrafeedback` message lists; see `train_core.preference.datasets`).

Defaults train the embedded tiny model on the shipped `polite_arithmetic` comparisons, offline,
in well under three minutes on two CPU cores.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from kitchen.config import defaults
from kitchen.errors import ConfigError
from kitchen.preference.settings import PreferenceSettings
from kitchen.preference.workflow import preference_workflow
from kitchen.recipe import Recipe
from kitchen.workflow import Workflow
from recipes.data import shipped_data
from recipes.judges import check_judge_name, get_judge


@defaults(
    dataset=shipped_data("preference/polite_arithmetic_train.jsonl"),
    eval_dataset=shipped_data("preference/polite_arithmetic_test.jsonl"),
    batch_size=16,
    learning_rate=1e-3,
)
class Config(PreferenceSettings):
    win_rate_judge: str | None = Field(
        None,
        description="also measure the policy's win rate against the reference with this judge (see recipes.judges)",
    )

    @field_validator("win_rate_judge")
    @classmethod
    def _registered_judge(cls, name: str | None) -> str | None:
        try:
            return None if name is None else check_judge_name(name)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None


def workflow(config: Config) -> Workflow:
    return preference_workflow(get_judge(config.win_rate_judge) if config.win_rate_judge else None)


RECIPE = Recipe(
    name="dpo",
    description="Direct Preference Optimization on comparison data",
    config_cls=Config,
    workflow=workflow,
)
