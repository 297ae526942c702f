"""decisions: train a model's probability distribution over given choices toward a target one.
Each prompt lists lettered choices and carries a target distribution; the policy's probability of
its answer is read from its logprobs and each reply rewarded `log target - log p`, whose expected
value is `-KL(p || target)` (see `recipes.envs.decisions`). Logged: `env/all/kl_to_target` and,
on the prompts again every `eval.every` steps, `eval/all/kl_to_target` and `eval/all/tv_to_target`.

Defaults run on the embedded tiny model, offline, on CPU, on the shipped prompts
(`recipes/data/decisions/choices.jsonl`): a warm start imitating a teacher who answers from
the target half of the time (else uniformly) teaches the answer format and that the prompts
differ; RL moves each prompt's distribution the rest of the way toward its target.
"""

from __future__ import annotations

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults
from kitchen.families.rl import RLLoopSettings, RLSettings, WarmStartSettings, env_check, env_task, rl_workflow_for
from recipes.envs.decisions import ENV, DecisionsSettings


@defaults(
    optimizer=OptimizerSettings(learning_rate=1e-3),
    sampling=SamplingSettings(max_tokens=2),
    rl=RLLoopSettings(group_size=16, groups_per_batch=8, num_batches=30),
    eval=HeldOutEval(every=10),
    warm_start=WarmStartSettings(steps=200),
)
class Config(RLSettings):
    env: DecisionsSettings = Field(default_factory=DecisionsSettings, description="the prompts and their targets")


RECIPE = Recipe(
    name="decisions",
    description="a distribution over given choices, read from the logprobs, trained toward a target",
    config_cls=Config,
    workflow=rl_workflow_for(env_task({"decisions": ENV}), env_check({"decisions": ENV})),
)
