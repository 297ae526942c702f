"""rm: a Bradley-Terry reward model on comparison files (the layouts `dpo` reads): a scalar head
on the final hidden state, trained so that chosen completions outscore rejected ones; held-out
pair accuracy at each evaluation; `kitchen export` writes a Hugging Face sequence-classification
model (local backend). See `train_core.preference.bradley_terry`.

Defaults train the embedded tiny model on the shipped `polite_arithmetic` comparisons, offline.
"""

from __future__ import annotations

from kitchen import OptimizerSettings, Recipe, defaults
from kitchen.families.preference import ComparisonData, RewardModelSettings, reward_model_workflow
from recipes.data import shipped_data


@defaults(
    data=ComparisonData(
        dataset=shipped_data("preference/polite_arithmetic_train.jsonl"),
        eval_dataset=shipped_data("preference/polite_arithmetic_test.jsonl"),
        batch_size=16,
        max_length=128,
    ),
    optimizer=OptimizerSettings(learning_rate=1e-3),
)
class Config(RewardModelSettings):
    pass


RECIPE = Recipe(
    name="rm",
    description="Bradley-Terry reward model on comparison data (held-out pair accuracy, exportable)",
    config_cls=Config,
    workflow=lambda config: reward_model_workflow(),
)
