"""dpo: Direct Preference Optimization on comparison JSONL (kitchen's `comparisons` layout,
`hh_rlhf` transcripts or `ultrafeedback` message lists; see `train_core.preference.datasets`).

Defaults train the embedded tiny model on the shipped `polite_arithmetic` comparisons, offline,
in well under three minutes on two CPU cores.
"""

from __future__ import annotations

from pydantic import Field

from kitchen.config import OptimizerConfig, Rate
from kitchen.data.loading import shipped_data
from kitchen.recipe import Recipe
from kitchen.stages.preference.judges import JudgeName, get_judge
from kitchen.workflow import Workflow
from kitchen.workflows.preference import preference_workflow
from train_core.preference.datasets import Layout


class Config(OptimizerConfig):
    dataset: str = Field(
        default_factory=lambda: shipped_data("preference/polite_arithmetic_train.jsonl"),
        description="comparison JSONL file",
    )
    dataset_layout: Layout = Field("comparisons", description="comparisons | hh_rlhf | ultrafeedback (both files)")
    eval_dataset: str | None = Field(
        default_factory=lambda: shipped_data("preference/polite_arithmetic_test.jsonl"),
        description="held-out comparison JSONL; none = no evaluation",
    )
    renderer: str | None = Field(None, description="renderer name; default: recommended for model_name")
    dpo_beta: float = Field(0.1, gt=0, description="DPO temperature: reward = beta * (logp - logp_ref)")
    batch_size: int = Field(16, ge=1, description="comparison pairs per optimizer step")
    num_epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1, description="stop after this many steps")
    learning_rate: Rate = 1e-3
    max_length: int | None = Field(1024, ge=2, description="tokens per side; longer sequences are cut from the right")
    save_every: int = Field(20, ge=0, description="checkpoint every N steps; 0 = only the final one")
    eval_every: int = Field(10, ge=0, description="held-out evaluation every N steps and at the end; 0 = never")
    win_rate_judge: JudgeName | None = Field(
        None, description="also measure the policy's win rate against the reference with this judge"
    )
    win_rate_prompts: int = Field(32, ge=1, description="held-out prompts the win rate samples")
    win_rate_max_tokens: int = Field(32, ge=1)
    win_rate_temperature: float = Field(1.0, ge=0)


def workflow(config: Config) -> Workflow:
    return preference_workflow(get_judge(config.win_rate_judge) if config.win_rate_judge else None)


RECIPE = Recipe(
    name="dpo",
    description="Direct Preference Optimization on comparison data",
    config_cls=Config,
    workflow=workflow,
)
