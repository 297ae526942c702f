"""The preference (DPO) workflow's settings; the dpo recipe subclasses them."""

from __future__ import annotations

from pydantic import Field, model_validator

from kitchen.config import Count
from kitchen.settings import DatasetSettings, OptimizerSettings, RendererSettings
from train_core.preference.datasets import Layout
from train_core.preference.losses import LABEL_SMOOTHING_LOSSES, PreferenceLossType


class PreferenceSettings(DatasetSettings, RendererSettings, OptimizerSettings):
    """DPO on comparison files; `batch_size` counts pairs. The win-rate keys are read only when the
    workflow is built with a judge."""

    dataset_layout: Layout = Field("comparisons", description="comparisons | hh_rlhf | ultrafeedback (both files)")
    dpo_beta: float = Field(0.1, gt=0, description="DPO temperature: reward = beta * (logp - logp_ref)")
    loss_type: PreferenceLossType = Field(
        "sigmoid",
        description="sigmoid (DPO) | cdpo (conservative DPO) | robust (rDPO) | ipo (on length-averaged logprobs) | "
        "hinge | simpo | orpo; each name means what it means in TRL (train_core.preference.losses)",
    )
    label_smoothing: float = Field(
        0.0, ge=0, lt=0.5, description="cdpo and robust: the assumed rate of flipped preference labels"
    )
    simpo_gamma: float = Field(0.5, description="simpo: the target reward margin")
    orpo_lambda: float = Field(0.1, ge=0, description="orpo: weight of the odds-ratio term")
    win_rate_prompts: Count = Field(32, description="held-out prompts the win rate samples")
    win_rate_max_tokens: Count = 32
    win_rate_temperature: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _label_smoothing_has_a_reader(self) -> PreferenceSettings:
        """TRL before 1.0 smoothed labels inside `sigmoid`, TRL 1.x ignores it there: rather than
        pick one meaning silently, a ported config is asked to name the loss it means."""
        if self.label_smoothing and self.loss_type not in LABEL_SMOOTHING_LOSSES:
            raise ValueError(
                f"label_smoothing: loss_type {self.loss_type!r} does not read it; use loss_type=cdpo "
                "(conservative DPO, label-smoothed sigmoid) or loss_type=robust (rDPO)"
            )
        return self
