"""online_dpo: DPO on pairs sampled from the policy as it trains, labelled by a judge: a rule
(see `recipes.judges`), a learned pairwise preference model (`preference_model`, e.g. the
`rlhf` recipe's phase 2) or a Bradley-Terry reward model (`reward_model`, the `rm` recipe), the
learned ones at `judge_model`. Evaluations report the policy's win rate against the initial
policy by the same judge.

Prompts come from comparison files (their completions are not used); defaults sample the
shipped `polite_arithmetic` prompts and judge them with its rule.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from kitchen.engine.config.loading import defaults
from kitchen.engine.errors import ConfigError
from kitchen.engine.recipe import Recipe
from kitchen.engine.workflow import Workflow
from kitchen.families.common.settings import OtherModel
from kitchen.families.common.setup import OpenOtherModel
from kitchen.families.preference.bradley_terry import OpenRewardModelJudge
from kitchen.families.preference.online_dpo import online_dpo_workflow
from kitchen.families.preference.reward_model import OpenModelJudge
from kitchen.families.preference.settings import OnlineDPOSettings, RewardJudgeSettings
from recipes.data import shipped_data
from recipes.judges import check_judge_name, get_judge

LEARNED_JUDGES = ("preference_model", "reward_model")


@defaults(
    dataset=shipped_data("preference/polite_arithmetic_train.jsonl"),
    eval_dataset=shipped_data("preference/polite_arithmetic_test.jsonl"),
    batch_size=16,
    learning_rate=1e-3,
    max_length=128,
    win_rate_prompts=32,
    win_rate_max_tokens=24,
)
class Config(OnlineDPOSettings, RewardJudgeSettings):
    judge: str = Field(
        "polite_arithmetic",
        description="labels the sampled pairs: a rule (recipes.judges), preference_model or reward_model "
        "(a learned judge at judge_model)",
    )
    judge_model: OtherModel = Field(default_factory=OtherModel, description="the learned judge's checkpoint")

    @field_validator("judge")
    @classmethod
    def _known_judge(cls, name: str) -> str:
        return name if name in LEARNED_JUDGES else check_judge_name(name)


def workflow(config: Config) -> Workflow:
    if config.judge not in LEARNED_JUDGES:
        return online_dpo_workflow(get_judge(config.judge))
    if not (config.judge_model.checkpoint or config.judge_model.model_name):
        raise ConfigError(f"judge={config.judge} needs judge_model.checkpoint (or .model_name)")
    opener: Any = OpenModelJudge() if config.judge == "preference_model" else OpenRewardModelJudge()
    return online_dpo_workflow(
        judge_setup=[
            OpenOtherModel("judge_model", "judge_client", "judge_client_path", name="open_judge_model"),
            opener,
        ]
    )


RECIPE = Recipe(
    name="online_dpo",
    description="Online DPO: pairs sampled from the policy, labelled by a rule or learned judge",
    config_cls=Config,
    workflow=workflow,
)
