"""nash_md: Nash-MD (Munos et al. 2023, as TRL's `NashMDTrainer`): each prompt gets one completion
from the policy and one from the geometric mixture of policy and frozen reference
(`nash_md.mixture_coef`, the reference's share); a judge gives the probability that the policy's
wins, and the policy trains on its own completion with a REINFORCE estimate of that preference
(0.5 as baseline) plus `dpo.beta` times a KL estimate to the reference. The judges are online
DPO's (`recipes.online_dpo`): a rule, a learned pairwise preference model or a Bradley-Terry
reward model at `judge.model`. Evaluations report the policy's win rate against the reference.

Prompts come from comparison files (their completions are not used); defaults sample the
shipped `polite_arithmetic` prompts and judge them with its rule. Needs a backend that samples
geometric mixtures (local, noop).
"""

from __future__ import annotations

from pydantic import Field

from kitchen import Recipe, Workflow
from kitchen.families.preference import NashMDSettings, nash_md_workflow
from recipes.online_dpo import ONLINE_DEFAULTS, Judge, judge_stages


@ONLINE_DEFAULTS
class Config(NashMDSettings):
    judge: Judge = Field(
        default_factory=lambda: Judge(name="polite_arithmetic"),
        description="the judge that compares the policy's completion with the mixture's",
    )


def workflow(config: Config) -> Workflow:
    return nash_md_workflow(judge_setup=judge_stages(config.judge))


RECIPE = Recipe(
    name="nash_md",
    description="Nash-MD: the policy's completion judged against a policy-reference mixture's, REINFORCE plus KL",
    config_cls=Config,
    workflow=workflow,
)
