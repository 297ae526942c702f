"""The preference (DPO) workflow's settings; the dpo recipe subclasses them."""

from __future__ import annotations

from pydantic import Field

from kitchen.config import Count, RunConfig
from kitchen.settings import DatasetSettings, OptimizerSettings, RendererSettings
from train_core.preference.datasets import Layout
from train_core.preference.losses import PreferenceLossType


class WinRateSettings(RunConfig):
    """The policy's win rate against a reference model on held-out prompts, by a judge."""

    win_rate_prompts: Count = Field(32, description="held-out prompts the win rate samples")
    win_rate_max_tokens: Count = Field(32, description="tokens per reply of each model")
    win_rate_temperature: float = Field(1.0, ge=0, description="sampling temperature of both models' replies")


class ComparisonSettings(RunConfig):
    """How comparison files are laid out, and whether a learned judge may answer Tie."""

    dataset_layout: Layout = Field("comparisons", description="comparisons | hh_rlhf | ultrafeedback (both files)")
    allow_tie: bool = Field(False, description="a learned judge (preference model) answers A, B or Tie")


class JudgeEvalSettings(RunConfig):
    """Held-out accuracy of a preference model being trained, as a judge."""

    judge_eval_pairs: Count = Field(100, description="held-out comparisons the judge metrics use")


class PreferenceSettings(DatasetSettings, RendererSettings, OptimizerSettings, WinRateSettings, ComparisonSettings):
    """DPO on comparison files; `batch_size` counts pairs. The win-rate keys are read only when the
    workflow is built with a judge."""

    dpo_beta: float = Field(0.1, gt=0, description="DPO temperature: reward = beta * (logp - logp_ref)")
    loss_type: PreferenceLossType = Field(
        "sigmoid", description="sigmoid (DPO) | ipo | hinge | robust | simpo | orpo (train_core.preference.losses)"
    )
    label_smoothing: float = Field(0.0, ge=0, lt=0.5, description="robust: the assumed label-noise rate")
    simpo_gamma: float = Field(0.5, description="simpo: the target reward margin")
    orpo_lambda: float = Field(0.1, ge=0, description="orpo: weight of the odds-ratio term")
