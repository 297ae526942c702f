"""The RL algorithm's knobs beyond the loss choice: advantage estimator, loss aggregation, KL to the
reference in the loss, entropy bonus, DAPO's dynamic sampling and overlong handling, and the
correction for sampler/trainer mismatch (names as verl and TRL use them where they have one).

Each key is read by the train_core function its description names, called from the RL step's
stages (`kitchen.families.rl.step`, `kitchen.families.rl.policy_update`). The defaults keep the original training:
group-mean centring (`dr_grpo`), losses summed over tokens (`token_sum`), no KL or entropy term in
the loss, every group trained, no correction. `algorithm: NAME` sets several together from
`kitchen.families.rl.presets` when the config is loaded (recipe defaults < preset < YAML < key=value).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kitchen.engine.config.loading import Count, RunConfig
from kitchen.families.rl.presets import ALGORITHM_NAMES, ALGORITHM_PRESETS, AlgorithmName
from train_core.rl.advantages import ADVANTAGE_ESTIMATORS, ScaleRewards, get_advantage_estimator
from train_core.rl.aggregation import AggregationMode
from train_core.rl.kl_estimators import KL_ESTIMATORS, kl_estimator_name
from train_core.rl.off_policy import MISLevel, RolloutCorrection, TISLevel


class DynamicSampling(BaseModel):
    """DAPO's dynamic sampling: drop groups whose rewards are all equal and sample more rounds
    until the batch is full (`train_core.rl.dynamic_sampling.BatchFill`)."""

    model_config = ConfigDict(extra="forbid")

    max_rounds: Count = Field(10, description="generation rounds per step at most; then train on what was kept")


class OverlongBuffer(BaseModel):
    """DAPO's soft overlong punishment (`train_core.rl.overlong.shape_overlong_rewards`)."""

    model_config = ConfigDict(extra="forbid")

    tokens: Count | None = Field(
        None,
        description="buffer L_c before max_tokens over which the penalty grows; default max_tokens / 5 (DAPO's ratio)",
    )
    penalty_factor: float = Field(1.0, gt=0, description="the penalty at (and past) max_tokens, negated")


class RolloutCorrectionSettings(BaseModel):
    """Importance corrections for the sampler's logprobs differing from the trainer's
    (`train_core.rl.off_policy.correct_off_policy`)."""

    model_config = ConfigDict(extra="forbid")

    tis: TISLevel | None = Field(None, description="truncated importance sampling: token or sequence weights")
    tis_cap: float = Field(2.0, gt=0, description="TIS: the cap C on each weight")
    mis: MISLevel | None = Field(
        None,
        description="masked importance sampling: mask tokens, or sequences (product or geometric mean), out of band",
    )
    mis_high: float = Field(2.0, gt=0, description="MIS: the band's upper bound on the ratio")
    mis_low: float | None = Field(None, gt=0, description="MIS: the band's lower bound; default 1 / mis_high")

    @model_validator(mode="after")
    def _band(self) -> RolloutCorrectionSettings:
        self.correction()  # train_core checks the band (an InvalidInputError is a ValueError)
        return self

    def correction(self) -> RolloutCorrection:
        """The settings as train_core's `RolloutCorrection`."""
        return RolloutCorrection(self.tis, self.tis_cap, self.mis, self.mis_high, self.mis_low)


class RLAlgorithmSettings(RunConfig):
    """RL algorithm knobs beyond the loss name: estimator, aggregation, clipping, KL and entropy
    terms, DAPO's data side, off-policy corrections, and the `algorithm` preset that sets them."""

    algorithm: AlgorithmName | None = Field(
        None,
        description="a published algorithm's settings as defaults for the keys below: "
        + ", ".join(ALGORITHM_NAMES)
        + " (kitchen.families.rl.presets); any key set in the YAML or as key=value still wins",
    )
    advantage_estimator: str = Field(
        "dr_grpo",
        description="advantages from total rewards (train_core.rl.advantages): "
        + ", ".join(ADVANTAGE_ESTIMATORS)
        + "; dr_grpo = group-mean centring, kitchen's default",
    )
    scale_rewards: ScaleRewards | None = Field(
        None, description="grpo only: divide by the std of the group, of the batch, or not at all; default group"
    )
    loss_aggregation: AggregationMode = Field(
        "token_sum",
        description="how token losses become the step's loss (verl's loss_agg_mode; token_sum = Tinker's sum)",
    )
    loss_aggregation_tokens: Count | None = Field(
        None, description="seq_mean_token_sum_norm's constant normaliser; default max_tokens"
    )
    kl_loss_coef: float = Field(0.0, ge=0, description="KL to the reference model as a loss term; 0 = off")
    kl_loss_estimator: str = Field(
        "k3", description="per-token KL estimator: " + ", ".join(KL_ESTIMATORS) + " (or verl's low_var_kl, ...)"
    )
    clip_ratio_low: float | None = Field(
        None, gt=0, lt=1, description="verl's PPO clip below: sets loss_fn_config clip_low_threshold = 1 - this"
    )
    clip_ratio_high: float | None = Field(
        None, gt=0, description="verl's PPO clip above (DAPO's clip-higher 0.28): clip_high_threshold = 1 + this"
    )
    clip_ratio_c: float | None = Field(
        None, gt=1, description="dual-clip PPO's cap on negative-advantage tokens (loss_fn_config clip_ratio_c)"
    )
    entropy_coeff: float = Field(0.0, ge=0, description="entropy bonus in the loss; needs the local backend")
    dynamic_sampling: DynamicSampling | None = Field(None, description="DAPO's dynamic sampling; unset = off")
    overlong_buffer: OverlongBuffer | None = Field(None, description="DAPO's soft overlong punishment; unset = off")
    overlong_filter: bool = Field(False, description="leave replies cut at max_tokens out of the loss")
    rollout_correction: RolloutCorrectionSettings | None = Field(
        None, description="TIS / MIS for sampler-trainer mismatch; unset = off (the mismatch is still logged)"
    )

    @classmethod
    def preset(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The `algorithm` preset's settings for a config being loaded (see
        `kitchen.engine.config.loading.load_config`)."""
        name = data.get("algorithm")
        preset = ALGORITHM_PRESETS.get(name) if isinstance(name, str) else None
        return {} if preset is None else {"algorithm": name, **preset.settings}

    def clip_config(self) -> dict[str, float]:
        """`clip_ratio_*` as the loss's config keys (verl's epsilons as Tinker's thresholds)."""
        clip: dict[str, float] = {}
        if self.clip_ratio_low is not None:
            clip["clip_low_threshold"] = 1.0 - self.clip_ratio_low
        if self.clip_ratio_high is not None:
            clip["clip_high_threshold"] = 1.0 + self.clip_ratio_high
        if self.clip_ratio_c is not None:
            clip["clip_ratio_c"] = self.clip_ratio_c
        return clip

    @field_validator("advantage_estimator")
    @classmethod
    def _known_estimator(cls, name: str) -> str:
        get_advantage_estimator(name)
        return name

    @field_validator("kl_loss_estimator")
    @classmethod
    def _known_kl_estimator(cls, name: str) -> str:
        kl_estimator_name(name)
        return name

    @model_validator(mode="after")
    def _scale_rewards_is_grpos(self) -> RLAlgorithmSettings:
        if self.scale_rewards is not None and self.advantage_estimator != "grpo":
            raise ValueError(f"scale_rewards applies to advantage_estimator grpo, not {self.advantage_estimator!r}")
        return self
