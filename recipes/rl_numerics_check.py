"""rl_numerics_check: does the trainer compute the logprobs the sampler sampled with, over a whole
long episode? Not a task to learn: `page_count` (a word counted over a document shown one page per
turn) only makes many turns and a long context.

Every step, before the update, the step's datums are scored by the trainer and compared with the
sampling logprobs turn by turn (`CheckLogprobAgreement`): `numerics/max_abs_diff`,
`numerics/kl_v1|kl_v2`, the first and the deepest turn's, and one `numerics.turn` log line per
turn. On the local backend in float32 every token agrees within 1e-4 (`numerics.tolerance`).

The shipped config runs 30 pages of 1,250 words on `tiny64k` (tiny with positions for 64k
tokens): episodes of about 62k tokens. Shorter: `env.num_pages=4 env.page_words=200`.
"""

from __future__ import annotations

from pydantic import Field

from kitchen import OptimizerSettings, Recipe, SamplingSettings, defaults
from kitchen.families.rl import (
    CheckLogprobAgreement,
    NumericsSettings,
    RLLoopSettings,
    RLSettings,
    env_task,
    rl_workflow_for,
)
from recipes.envs.page_count import ENV, PageCountSettings


@defaults(
    optimizer=OptimizerSettings(learning_rate=1e-4),
    sampling=SamplingSettings(max_tokens=8),
    rl=RLLoopSettings(group_size=2, groups_per_batch=1, num_batches=2),
)
class Config(RLSettings):
    env: PageCountSettings = Field(default_factory=PageCountSettings, description="the long many-turn episode")
    numerics: NumericsSettings = Field(
        default_factory=NumericsSettings, description="what the sampler/trainer agreement check reports"
    )


RECIPE = Recipe(
    name="rl_numerics_check",
    description="many-turn long episodes: trainer logprobs vs the sampler's, turn by turn",
    config_cls=Config,
    workflow=rl_workflow_for(env_task({"page_count": ENV}), checks=[CheckLogprobAgreement()]),
)
