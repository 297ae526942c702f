"""The preference (DPO) workflow's settings; the dpo recipe subclasses them."""

from __future__ import annotations

from pydantic import Field, model_validator

from kitchen.engine.config.loading import Count, RunConfig
from kitchen.families.common.settings import DatasetSettings, OptimizerSettings, RendererSettings
from train_core.preference.datasets import Layout
from train_core.preference.losses import LABEL_SMOOTHING_LOSSES, PreferenceLossType


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
        "sigmoid",
        description="sigmoid (DPO) | cdpo (conservative DPO) | robust (rDPO) | ipo (on length-averaged logprobs) | "
        "hinge | simpo | orpo; each name means what it means in TRL (train_core.preference.losses)",
    )
    label_smoothing: float = Field(
        0.0, ge=0, lt=0.5, description="cdpo and robust: the assumed rate of flipped preference labels"
    )
    simpo_gamma: float = Field(0.5, description="simpo: the target reward margin")
    orpo_lambda: float = Field(0.1, ge=0, description="orpo: weight of the odds-ratio term")

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


class KTOSettings(DatasetSettings, RendererSettings, OptimizerSettings, ComparisonSettings):
    """KTO on unpaired examples (`train_core.preference.datasets.load_unpaired`: labelled records,
    or comparisons split into a desirable and an undesirable example); `batch_size` counts
    examples, each with its mismatched pair for the reference point."""

    kto_beta: float = Field(0.1, gt=0, description="KTO temperature: reward = beta * (logp - logp_ref)")
    desirable_weight: float = Field(1.0, gt=0, description="weight of the desirable examples' losses")
    undesirable_weight: float = Field(1.0, gt=0, description="weight of the undesirable examples' losses")

    @model_validator(mode="after")
    def _batch_has_mismatched_pairs(self) -> KTOSettings:
        if self.batch_size < 2:
            raise ValueError(
                "batch_size: KTO needs at least 2 examples per batch (its reference point pairs "
                "each prompt with another example's completion)"
            )
        return self


class RewardModelSettings(DatasetSettings, RendererSettings, OptimizerSettings, ComparisonSettings):
    """A Bradley-Terry reward model on comparison files (`train_core.preference.bradley_terry`);
    `batch_size` counts pairs."""

    score_tokens: tuple[str, str] = Field(
        (" good", " bad"),
        description="two single-token strings whose unembedding rows' difference is the scalar head "
        "(score = log p(first) - log p(second) after the conversation)",
    )
    center_rewards_coefficient: float = Field(
        0.0, ge=0, description="TRL's: adds coef * (s_c + s_r)^2, keeping scores centred on 0 (0 = off)"
    )


class OnlineDPOSettings(PreferenceSettings):
    """Online DPO: each step samples two completions per prompt from the current policy, a judge
    picks the preferred one, and the pairs train one DPO step (any `loss_type`) against the frozen
    initial policy. `dataset` supplies prompts (its comparisons' completions are not used);
    `batch_size` counts prompts; ties are dropped."""

    max_tokens: Count = Field(24, description="tokens per sampled completion")
    temperature: float = Field(1.0, gt=0, description="sampling temperature of the two completions")


class RewardJudgeSettings(RunConfig):
    """A reward model (the `rm` recipe's checkpoint) used as a judge."""

    judge_score_tokens: tuple[str, str] = Field(
        (" good", " bad"), description="the score tokens the reward model was trained with (its score_tokens)"
    )
