"""prm: a process reward model (TRL's `PRMTrainer`) on stepwise-supervision files in
trl-lib/math_shepherd's layout (`prompt`, `completions` = steps, `labels` = one bool per step;
a local file or a hub dataset): the language model learns to answer a label token (`+` / `-`)
at the end of each step, TRL's two-class token head read from the LM; held-out per-step and
per-trajectory accuracy at each evaluation. A trained PRM scores RL replies step by step (the
RL family's `process_reward`). See `train_core.preference.process_reward`.

Defaults train the embedded tiny model on the shipped `count_up` solutions (`recipes/data/stepwise`), offline.
"""

from __future__ import annotations

from kitchen import DataSettings, HeldOutEval, OptimizerSettings, Recipe, defaults
from kitchen.families.preference import ProcessRewardSettings, process_reward_workflow
from recipes.data import shipped_data


@defaults(
    data=DataSettings(
        dataset=shipped_data("stepwise/count_up_train.jsonl"),
        eval_dataset=shipped_data("stepwise/count_up_test.jsonl"),
        batch_size=16,
        num_epochs=10,
        max_length=64,
        max_steps=120,
    ),
    optimizer=OptimizerSettings(learning_rate=1e-3),
    eval=HeldOutEval(every=40),
)
class Config(ProcessRewardSettings):
    pass


RECIPE = Recipe(
    name="prm",
    description="process reward model on stepwise labels (TRL's PRMTrainer; held-out per-step accuracy)",
    config_cls=Config,
    workflow=lambda config: process_reward_workflow(),
)
