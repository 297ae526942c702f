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

from kitchen import Recipe, Workflow
from kitchen.families.preference import XPOSettings, xpo_workflow
from recipes.online_dpo import ONLINE_DEFAULTS, Judge, judge_stages


@ONLINE_DEFAULTS
class Config(XPOSettings):
    judge: Judge = Field(
        default_factory=lambda: Judge(name="polite_arithmetic"), description="the judge that ranks each pair"
    )


def workflow(config: Config) -> Workflow:
    return xpo_workflow(judge_setup=judge_stages(config.judge))


RECIPE = Recipe(
    name="xpo",
    description="XPO: online DPO of policy vs reference completions plus an exploration term",
    config_cls=Config,
    workflow=workflow,
)
