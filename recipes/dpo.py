"""dpo: Direct Preference Optimization on comparison JSONL (kitchen's `comparisons` layout,
`hh_rlhf` transcripts or `ultrafeedback` message lists; see `train_core.preference.datasets`).

Defaults train the embedded tiny model on the shipped `polite_arithmetic` comparisons, offline,
in well under three minutes on two CPU cores.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from kitchen.engine.config.loading import defaults
from kitchen.engine.errors import ConfigError
from kitchen.engine.recipe import Recipe
from kitchen.engine.workflow import Workflow
from kitchen.families.common.settings import OtherModel
from kitchen.families.common.setup import OpenOtherModel
from kitchen.families.preference.reward_model import OpenModelJudge
from kitchen.families.preference.settings import PreferenceSettings
from kitchen.families.preference.workflow import preference_workflow
from recipes.data import shipped_data
from recipes.judges import check_judge_name, get_judge

PREFERENCE_MODEL = "preference_model"
"""`win_rate_judge` value naming a learned judge (see `kitchen.families.common.completers.PreferenceModelJudge`)."""


@defaults(
    dataset=shipped_data("preference/polite_arithmetic_train.jsonl"),
    eval_dataset=shipped_data("preference/polite_arithmetic_test.jsonl"),
    batch_size=16,
    learning_rate=1e-3,
)
class Config(PreferenceSettings):
    win_rate_judge: str | None = Field(
        None,
        description="also measure the policy's win rate against the reference with this judge: a rule "
        "(see recipes.judges) or preference_model (a learned judge at win_rate_judge_model)",
    )
    win_rate_judge_model: OtherModel = Field(
        default_factory=OtherModel, description="win_rate_judge=preference_model: its checkpoint or run directory"
    )

    @field_validator("win_rate_judge")
    @classmethod
    def _registered_judge(cls, name: str | None) -> str | None:
        if name is None or name == PREFERENCE_MODEL:
            return name
        return check_judge_name(name)


def workflow(config: Config) -> Workflow:
    if config.win_rate_judge == PREFERENCE_MODEL:
        model = config.win_rate_judge_model
        if not (model.checkpoint or model.model_name):
            raise ConfigError("win_rate_judge=preference_model needs win_rate_judge_model.checkpoint (or .model_name)")
        setup = [
            OpenOtherModel("win_rate_judge_model", "judge_client", "judge_client_path", name="open_judge_model"),
            OpenModelJudge(),
        ]
        return preference_workflow(judge_setup=setup)
    return preference_workflow(get_judge(config.win_rate_judge) if config.win_rate_judge else None)


RECIPE = Recipe(
    name="dpo",
    description="Direct Preference Optimization on comparison data",
    config_cls=Config,
    workflow=workflow,
)
