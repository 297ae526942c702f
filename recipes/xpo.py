"""xpo: XPO (Exploratory Preference Optimization, Xie et al. 2024, as TRL's `XPOTrainer`): online
DPO on pairs of one completion from the policy and one from the frozen reference model, labelled
by a judge, plus `xpo.alpha` times the policy's logprob of the reference's completion (an
exploration bonus). The judges are online DPO's (`recipes.online_dpo`): a rule, a learned
pairwise preference model or a Bradley-Terry reward model at `judge.model`. Evaluations report
the policy's win rate against the reference by the same judge.

Prompts come from comparison files (their completions are not used); defaults sample the
shipped `polite_arithmetic` prompts and judge them with its rule.
"""

from __future__ import annotations

from pydantic import Field

from kitchen import OptimizerSettings, Recipe, Workflow, defaults
from kitchen.families.preference import ComparisonData, WinRateSettings, XPOSettings, judge_setup, xpo_workflow
from recipes.data import shipped_data
from recipes.judges import get_judge
from recipes.online_dpo import JUDGE_MODEL, Judge


@defaults(
    data=ComparisonData(
        dataset=shipped_data("preference/polite_arithmetic_train.jsonl"),
        eval_dataset=shipped_data("preference/polite_arithmetic_test.jsonl"),
        batch_size=16,
        max_length=128,
    ),
    optimizer=OptimizerSettings(learning_rate=1e-3),
    win_rate=WinRateSettings(prompts=32, max_tokens=24),
)
class Config(XPOSettings):
    judge: Judge = Field(
        default_factory=lambda: Judge(name="polite_arithmetic"), description="the judge that ranks each pair"
    )


def workflow(config: Config) -> Workflow:
    judge = config.judge
    return xpo_workflow(
        judge_setup=judge_setup(judge.name, JUDGE_MODEL, judge.model, get_judge, score_tokens=judge.score_tokens)
    )


RECIPE = Recipe(
    name="xpo",
    description="XPO: online DPO of policy vs reference completions plus an exploration term",
    config_cls=Config,
    workflow=workflow,
)
