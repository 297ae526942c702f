"""rlhf: RL from pairwise preferences in three phases, each an ordinary run in its own
subdirectory, that also run alone (`phase=sft|preference_model|rl`): SFT on the comparisons'
completions, a pairwise preference model trained on them, then RL whose rewards come from a
tournament judged by that model (the machinery: `kitchen.families.preference.rlhf`).

Defaults train the embedded tiny model on the shipped `polite_arithmetic` comparisons, offline;
the RL policy's win rate against the SFT policy is judged by the rule judge.
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from kitchen import CheckpointSettings, HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults
from kitchen.families.preference import ComparisonData, ComparisonFiles, WinRateSettings
from kitchen.families.preference.rlhf import (
    PreferenceModelPhase,
    RLHFSettings,
    RLPhase,
    SFTPhase,
    TournamentSettings,
    check_phases,
    preference_model_workflow,
    rl_phase_workflow,
    rlhf_workflow_for,
    sft_workflow,
)
from kitchen.families.rl import RLLoopSettings, RLSettings
from recipes.data import shipped_data
from recipes.judges import check_any_judge, get_judge

TRAIN = shipped_data("preference/polite_arithmetic_train.jsonl")
TEST = shipped_data("preference/polite_arithmetic_test.jsonl")
FILES = ComparisonFiles(dataset=TRAIN, eval_dataset=TEST)


@defaults(
    renderer="role_colon",
    data=ComparisonData(dataset=TRAIN, eval_dataset=TEST, batch_size=32, num_epochs=8, max_length=64),
    optimizer=OptimizerSettings(learning_rate=3e-3),
    checkpoint=CheckpointSettings(save_every=20),
    eval=HeldOutEval(every=0),
)
class SFT(SFTPhase):
    pass


@defaults(
    renderer="role_colon",
    data=ComparisonData(dataset=TRAIN, eval_dataset=TEST, batch_size=32, num_epochs=2, max_length=128),
    optimizer=OptimizerSettings(learning_rate=2e-3),
    checkpoint=CheckpointSettings(save_every=20),
    eval=HeldOutEval(every=20),
)
class PreferenceModel(PreferenceModelPhase):
    pass


@defaults(
    renderer="role_colon",
    data=FILES,
    optimizer=OptimizerSettings(learning_rate=2e-4),
    sampling=SamplingSettings(max_tokens=24),
    rl=RLLoopSettings(group_size=4, groups_per_batch=16, num_batches=25),
    eval=HeldOutEval(every=5),
    checkpoint=CheckpointSettings(save_every=10),
    win_rate=WinRateSettings(prompts=100, max_tokens=24),
    tournament=TournamentSettings(pair_scheme="both_ways"),
)
class RL(RLSettings, RLPhase):
    pass


PHASE_RECIPES = {
    "sft": Recipe("rlhf_sft", "rlhf phase 1: SFT on the comparisons' completions", SFT, sft_workflow),
    "preference_model": Recipe(
        "rlhf_preference_model", "rlhf phase 2: a pairwise preference model", PreferenceModel, preference_model_workflow
    ),
    "rl": Recipe(
        "rlhf_rl", "rlhf phase 3: RL from pairwise preferences", RL, lambda config: rl_phase_workflow(config, get_judge)
    ),
}


@defaults(renderer="role_colon")
class Config(RLHFSettings):
    data: ComparisonFiles = Field(default_factory=lambda: FILES.model_copy(), description="the comparison files")

    @field_validator("reward_judge", "win_rate_judge")
    @classmethod
    def _judges(cls, name: str | None) -> str | None:
        return check_any_judge(name)

    @model_validator(mode="after")
    def _phases_valid(self) -> Config:
        check_phases(PHASE_RECIPES, self)
        return self


RECIPE = Recipe(
    name="rlhf",
    description="RLHF from pairwise preferences: SFT, a preference model, then RL with tournament rewards",
    config_cls=Config,
    workflow=rlhf_workflow_for(PHASE_RECIPES),
)
