"""The preference family's settings: the comparison `data` section, the `dpo`, `kto` and
`reward_model` loss sections, the `win_rate` evaluation, and the root settings of each workflow
(DPO, online DPO, KTO, a Bradley-Terry reward model); the recipes subclass them."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from kitchen.engine.config.run import Count
from kitchen.engine.config.sections import RESUME_SAFE, Section
from kitchen.families.common.settings import (
    DataSettings,
    OtherModel,
    RendererSettings,
    SamplingSettings,
    TrainingSettings,
)
from train_core.preference.datasets import Layout
from train_core.preference.losses import (
    FDIV_LOSSES,
    LABEL_SMOOTHING_LOSSES,
    TRL_DPO_LOSS_TYPES,
    FDivergence,
    PreferenceLossParams,
    PreferenceLossType,
    PreferenceObjective,
)


class ComparisonFiles(Section):
    """Comparison files (train and held out), their layout, and whether a learned judge may answer
    Tie: what every reader of comparisons needs (the `data` section of an RL phase whose prompts
    come from them; `ComparisonData` adds batches and epochs)."""

    dataset: str = Field(..., description="comparison file (train)")
    eval_dataset: str | None = Field(
        None, description="comparison file (held out); none = no evaluation", json_schema_extra=RESUME_SAFE
    )
    dataset_layout: Layout = Field("comparisons", description="comparisons | hh_rlhf | ultrafeedback (both files)")
    allow_tie: bool = Field(False, description="a learned judge (preference model) answers A, B or Tie")


class ComparisonData(DataSettings, ComparisonFiles):
    """Config section `data` of the preference family: comparison files read in epochs of shuffled
    batches (`batch_size` counts pairs, or examples for KTO)."""


class WinRateSettings(Section):
    """Config section `win_rate`: the policy's win rate against a reference model on held-out
    prompts, by a judge."""

    FLAT_PREFIX: ClassVar[str] = "win_rate_"

    judge: str | None = Field(
        None,
        description="measure the win rate with this judge: a rule (recipes.judges), or preference_model / "
        "reward_model (a learned judge at judge_model); none = no win rate",
    )
    judge_model: OtherModel = Field(
        default_factory=OtherModel, description="judge preference_model or reward_model: its checkpoint"
    )
    prompts: Count = Field(32, description="held-out prompts the win rate samples")
    max_tokens: Count = Field(32, description="tokens per reply of each model")
    temperature: float = Field(1.0, ge=0, description="sampling temperature of both models' replies")


class JudgeEvalSettings(Section):
    """Config section `judge_eval`: held-out accuracy of a preference model being trained, as a judge."""

    FLAT_PREFIX: ClassVar[str] = "judge_eval_"

    pairs: Count = Field(100, description="held-out comparisons the judge metrics use")


class DPOLoss(Section):
    """Config section `dpo`: the preference loss (one `loss_type`, or several summed with
    `loss_weights`), its variants' parameters and the reference model's handling; every key named
    as TRL's `DPOConfig` names it means what it means there (`train_core.preference.losses`)."""

    FLAT: ClassVar[Mapping[str, str]] = {"beta": "dpo_beta"}

    beta: float = Field(0.1, gt=0, description="DPO temperature: reward = beta * (logp - logp_ref)")
    loss_type: PreferenceLossType | list[PreferenceLossType] = Field(
        "sigmoid",
        description="one loss or a list summed with loss_weights (TRL's names: "
        + ", ".join(TRL_DPO_LOSS_TYPES)
        + "; kitchen's cdpo, simpo, orpo; TRL's CPO alphapo); each means what it means in TRL "
        "(train_core.preference.losses)",
    )
    loss_weights: list[float] | None = Field(
        None, description="one weight per loss_type (TRL's loss_weights, e.g. MPO's [0.8, 0.2, 1.0]); default 1 each"
    )
    label_smoothing: float = Field(
        0.0,
        ge=0,
        lt=0.5,
        description="cdpo, robust, aot, aot_unpaired, alphapo: the assumed rate of flipped labels; exo_pair: its "
        "epsilon",
    )
    f_divergence_type: FDivergence = Field(
        "reverse_kl",
        description="f-DPO's divergence (reverse_kl = DPO, forward_kl, js_divergence, alpha_divergence) for the "
        "losses on the chosen-rejected difference: " + ", ".join(sorted(FDIV_LOSSES)),
    )
    f_alpha_divergence_coef: float = Field(0.5, description="alpha_divergence: its alpha")
    discopop_tau: float = Field(0.05, gt=0, description="discopop: the temperature of its log-ratio modulation")
    simpo_gamma: float = Field(0.5, description="simpo: the target reward margin")
    orpo_lambda: float = Field(0.1, ge=0, description="orpo: weight of the odds-ratio term")
    alphapo_alpha: float = Field(
        0.0, description="alphapo: the reward shape alpha (TRL's CPO alpha; 0 = simpo's log-probability reward)"
    )
    rpo_alpha: float | None = Field(
        None,
        ge=0,
        description="RPO (TRL < 1.0's rpo_alpha): adds the chosen completions' NLL (loss_type sft) with this weight",
    )
    ld_alpha: float | None = Field(
        None,
        ge=0,
        le=1,
        description="LD-DPO: a longer completion's tokens past the shorter one's length count this much (1 = plain)",
    )
    use_weighting: bool = Field(
        False,
        description="WPO: weigh each pair by the policy's aligned probability of both completions (local backend)",
    )
    reference_free: bool = Field(
        False, description="score against a uniform reference (its logprobs 0) instead of the frozen initial policy"
    )
    sync_ref_model: bool = Field(
        False, description="TR-DPO: move the reference towards the policy every ref_model_sync_steps steps"
    )
    ref_model_mixup_alpha: float = Field(
        0.6,
        gt=0,
        le=1,
        description="TR-DPO: reference = alpha * policy + (1 - alpha) * reference at each sync (1 = hard update; "
        "below 1 needs a backend that mixes weights: local)",
    )
    ref_model_sync_steps: Count = Field(512, description="TR-DPO: optimizer steps between reference syncs (tau)")

    @property
    def loss_types(self) -> list[str]:
        """`loss_type` as a list (one name is a list of one)."""
        return [self.loss_type] if isinstance(self.loss_type, str) else list(self.loss_type)

    @model_validator(mode="after")
    def _consistent(self) -> DPOLoss:
        if self.loss_weights is not None and len(self.loss_weights) != len(self.loss_types):
            raise ValueError(
                f"loss_weights: {len(self.loss_weights)} weights for {len(self.loss_types)} loss types; give one each"
            )
        if self.label_smoothing and not set(self.loss_types) & LABEL_SMOOTHING_LOSSES:
            # TRL before 1.0 smoothed labels inside `sigmoid`, TRL 1.x ignores it there: rather than
            # pick one meaning silently, a ported config is asked to name the loss it means.
            raise ValueError(
                f"label_smoothing: loss_type {self.loss_type} does not read it; use dpo.loss_type=cdpo "
                "(conservative DPO, label-smoothed sigmoid) or dpo.loss_type=robust (rDPO), or "
                f"{', '.join(sorted(LABEL_SMOOTHING_LOSSES - {'cdpo', 'robust'}))}"
            )
        self.objective()  # train_core checks the combination (a ValueError: a field error here)
        return self

    def objective(self) -> PreferenceObjective:
        """The loss terms and their parameters (`rpo_alpha` adds the `sft` term)."""
        weights = self.loss_weights or [1.0] * len(self.loss_types)
        terms = list(zip(self.loss_types, weights, strict=True))
        if self.rpo_alpha is not None:
            terms.append(("sft", self.rpo_alpha))
        params = PreferenceLossParams(
            beta=self.beta,
            label_smoothing=self.label_smoothing,
            simpo_gamma=self.simpo_gamma,
            orpo_lambda=self.orpo_lambda,
            alphapo_alpha=self.alphapo_alpha,
            discopop_tau=self.discopop_tau,
            f_divergence=self.f_divergence_type,
            f_alpha=self.f_alpha_divergence_coef,
        )
        return PreferenceObjective(tuple(terms), params, self.use_weighting)

    @property
    def scores_reference(self) -> bool:
        """Whether the loss reads the reference model's logprobs (else they are zeros, unscored)."""
        return not self.reference_free and self.objective().uses_reference

    @property
    def reference_sync_steps(self) -> int:
        """TR-DPO's sync period; 0 = never."""
        return self.ref_model_sync_steps if self.sync_ref_model else 0

    def unread_keys(self, read: Collection[str]) -> list[str]:
        """The keys set away from their defaults that a workflow reading only `read` of this
        section (XPO, Nash-MD) would silently ignore."""
        default = DPOLoss()
        return [
            name
            for name in type(self).model_fields
            if name not in read and getattr(self, name) != getattr(default, name)
        ]


class KTOLoss(Section):
    """Config section `kto`: the loss on unpaired desirable / undesirable examples, KTO
    (`train_core.preference.kto`) or BCO (`train_core.preference.bco`)."""

    FLAT: ClassVar[Mapping[str, str]] = {"beta": "kto_beta"}

    loss_type: Literal["kto", "bco"] = Field(
        "kto",
        description="kto (TRL's KTOTrainer) or bco (TRL's BCOTrainer: a binary classifier on beta * log-ratio "
        "shifted by the running mean of the rewards; no underlying-distribution matching)",
    )
    beta: float = Field(0.1, gt=0, description="temperature: reward = beta * (logp - logp_ref)")
    desirable_weight: float = Field(1.0, gt=0, description="kto: weight of the desirable examples' losses")
    undesirable_weight: float = Field(1.0, gt=0, description="kto: weight of the undesirable examples' losses")

    @model_validator(mode="after")
    def _weights_are_ktos(self) -> KTOLoss:
        if self.loss_type == "bco" and (self.desirable_weight, self.undesirable_weight) != (1.0, 1.0):
            raise ValueError("desirable_weight / undesirable_weight are KTO's; BCO (loss_type bco) does not read them")
        return self


SCORE_TOKENS = (" good", " bad")
"""A Bradley-Terry reward model's default score tokens (`reward_model.score_tokens`)."""


class RewardModelHead(Section):
    """Config section `reward_model`: the scalar head of a Bradley-Terry reward model and its loss
    (`train_core.preference.bradley_terry`)."""

    score_tokens: tuple[str, str] = Field(
        SCORE_TOKENS,
        description="two single-token strings whose unembedding rows' difference is the scalar head "
        "(score = log p(first) - log p(second) after the conversation)",
    )
    center_rewards_coefficient: float = Field(
        0.0, ge=0, description="TRL's: adds coef * (s_c + s_r)^2, keeping scores centred on 0 (0 = off)"
    )


class JudgeSettings(Section):
    """Config section `judge`: the judge that labels sampled pairs (online DPO). A plain value is its name."""

    FLAT: ClassVar[Mapping[str, str]] = {"name": "judge", "model": "judge_model", "score_tokens": "judge_score_tokens"}
    SHORTHAND: ClassVar[str | None] = "name"

    name: str = Field(
        ..., description="a rule (recipes.judges), or preference_model / reward_model (a learned judge at model)"
    )
    model: OtherModel = Field(default_factory=OtherModel, description="the learned judge's checkpoint")
    score_tokens: tuple[str, str] = Field(
        SCORE_TOKENS, description="reward_model: the score tokens it was trained with (its reward_model.score_tokens)"
    )


class PreferenceSettings(TrainingSettings, RendererSettings):
    """DPO on comparison files. The win-rate keys are read only when the workflow is built with a judge."""

    data: ComparisonData = Field(..., description="the comparison files, batches (of pairs) and epochs")
    dpo: DPOLoss = Field(default_factory=DPOLoss, description="the DPO loss")
    win_rate: WinRateSettings = Field(
        default_factory=WinRateSettings, description="the policy's win rate against the reference, by a judge"
    )


class KTOSettings(TrainingSettings, RendererSettings):
    """KTO on unpaired examples (`train_core.preference.datasets.load_unpaired`: labelled records,
    or comparisons split into a desirable and an undesirable example); `data.batch_size` counts
    examples, each with its mismatched pair for the reference point."""

    data: ComparisonData = Field(..., description="the example files, batches (of examples) and epochs")
    kto: KTOLoss = Field(default_factory=KTOLoss, description="the KTO loss")

    @model_validator(mode="after")
    def _batch_has_mismatched_pairs(self) -> KTOSettings:
        if self.data.batch_size < 2:
            raise ValueError(
                "data.batch_size: KTO needs at least 2 examples per batch (its reference point pairs "
                "each prompt with another example's completion)"
            )
        return self


class RewardModelSettings(TrainingSettings, RendererSettings):
    """A Bradley-Terry reward model on comparison files; `data.batch_size` counts pairs."""

    data: ComparisonData = Field(..., description="the comparison files, batches (of pairs) and epochs")
    reward_model: RewardModelHead = Field(default_factory=RewardModelHead, description="the scalar head and its loss")


class OnlineDPOSettings(PreferenceSettings):
    """Online DPO: each step samples two completions per prompt from the current policy, a judge
    picks the preferred one, and the pairs train one DPO step (any `dpo.loss_type`) against the
    frozen initial policy. `data.dataset` supplies prompts (its comparisons' completions are not
    used); `data.batch_size` counts prompts; ties are dropped."""

    sampling: SamplingSettings = Field(
        default_factory=lambda: SamplingSettings(max_tokens=24), description="how the two completions are sampled"
    )
    judge: JudgeSettings = Field(..., description="the judge that labels the sampled pairs")

    @model_validator(mode="after")
    def _two_different_completions(self) -> OnlineDPOSettings:
        if self.sampling.temperature <= 0:
            raise ValueError("sampling.temperature: online DPO samples two completions to compare; it must be > 0")
        return self
