"""twenty_questions: multi-turn RL against a second model. The policy asks yes/no questions about
a secret noun from a shipped list, an answerer model (`env.answerer`: opened under its own name,
sampled only, never trained) answers knowing the secret, and the policy wins by naming the noun
within `env.max_turns` replies (`env/all/won`, `eval/all/won` over every noun).

Defaults run on the embedded tiny model, offline, on CPU: four nouns told apart by two questions
(three replies a game); the answerer is a shipped tiny checkpoint taught the list's answers
(`recipes/data/teachers/build_answerer.py`); a warm start imitates a teacher who asks the list's
questions and then names the fitting noun only half of the time (else any noun), then 20 RL steps
with games weighted equally (`seq_mean_token_mean`). RL learns to name the noun the answers fit:
the held-out win rate rises from 0.50-0.56 right after the warm start to 0.88-0.97 (seeds 0-2);
see docs/how-to/text-games.md.
"""

from __future__ import annotations

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults
from kitchen.families.rl import (
    AlgorithmSettings,
    RLLoopSettings,
    RLSettings,
    WarmStartSettings,
    env_check,
    env_task,
    rl_workflow_for,
)
from recipes.envs.twenty_questions import ENV, TwentyQuestionsSettings


@defaults(
    optimizer=OptimizerSettings(learning_rate=1e-3),
    sampling=SamplingSettings(max_tokens=12),
    rl=RLLoopSettings(group_size=8, groups_per_batch=16, num_batches=20),
    algorithm=AlgorithmSettings(loss_aggregation="seq_mean_token_mean"),
    eval=HeldOutEval(every=10),
    warm_start=WarmStartSettings(steps=200),
)
class Config(RLSettings):
    env: TwentyQuestionsSettings = Field(
        default_factory=TwentyQuestionsSettings, description="the nouns, the answerer, the turn budget"
    )


RECIPE = Recipe(
    name="twenty_questions",
    description="multi-turn RL: ask an answerer model yes/no questions, then name the secret noun",
    config_cls=Config,
    workflow=rl_workflow_for(env_task({"twenty_questions": ENV}), env_check({"twenty_questions": ENV})),
)
