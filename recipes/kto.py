"""kto: Kahneman-Tversky Optimization on unpaired examples, each completion labelled desirable or
undesirable (TRL's `{"prompt", "completion", "label"}` records), or on comparison files split
into one desirable and one undesirable example per comparison; `kto.loss_type: bco` trains BCO
(TRL's BCOTrainer) on the same data instead.

Defaults train the embedded tiny model on the shipped `polite_arithmetic` comparisons, unpaired,
offline on two CPU cores.
"""

from __future__ import annotations

from kitchen import OptimizerSettings, Recipe, defaults
from kitchen.families.preference import ComparisonData, KTOSettings, kto_workflow
from recipes.data import shipped_data


@defaults(
    data=ComparisonData(
        dataset=shipped_data("preference/polite_arithmetic_train.jsonl"),
        eval_dataset=shipped_data("preference/polite_arithmetic_test.jsonl"),
        batch_size=16,
    ),
    optimizer=OptimizerSettings(learning_rate=1e-3),
)
class Config(KTOSettings):
    pass


RECIPE = Recipe(
    name="kto",
    description="KTO (or BCO): preference learning from unpaired desirable / undesirable examples",
    config_cls=Config,
    workflow=lambda config: kto_workflow(config.kto.loss_type),
)
