"""forecasting: RL on probability answers. Each question asks whether an uncertain event happens;
the policy answers a probability, rewarded by the Brier score against how the event resolved
(`env.dataset`: resolved questions as JSONL; default: generated marble draws). The held-out
questions' calibration is logged with their reward: `eval/all/calibration/ece` and the Brier
score's decomposition (`.../reliability`, `.../resolution`, `.../uncertainty`).

Defaults run on the embedded tiny model, offline, on CPU: a warm start imitating a forecaster who
is right half of the time (else says a random probability), then RL, which lowers the held-out
Brier score and ECE.
"""

from __future__ import annotations

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults
from kitchen.families.rl import RLLoopSettings, RLSettings, WarmStartSettings, env_check, env_task, rl_workflow_for
from recipes.envs.forecasting import ENV, ForecastingSettings


@defaults(
    optimizer=OptimizerSettings(learning_rate=1e-3),
    sampling=SamplingSettings(max_tokens=6),
    rl=RLLoopSettings(group_size=8, groups_per_batch=16, num_batches=30),
    eval=HeldOutEval(every=10),
    warm_start=WarmStartSettings(steps=200),
)
class Config(RLSettings):
    env: ForecastingSettings = Field(default_factory=ForecastingSettings, description="the questions")


RECIPE = Recipe(
    name="forecasting",
    description="RL on probability answers rewarded by the Brier score, with calibration metrics",
    config_cls=Config,
    workflow=rl_workflow_for(env_task({"forecasting": ENV}), env_check({"forecasting": ENV})),
)
