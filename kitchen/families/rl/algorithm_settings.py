"""The `algorithm` section of RL configs: the policy-gradient loss and its clip keys, advantage
estimator, loss aggregation, KL to the reference (in the reward or in the loss), entropy bonus,
DAPO's dynamic sampling and overlong handling, and the correction for sampler/trainer mismatch
(names as verl and TRL use them where they have one).

Each key is read by the train_core function its description names, called from the RL step's
stages (`kitchen.families.rl.step`, `kitchen.families.rl.policy_update`). The defaults keep the
original training: importance sampling, group-mean centring (`dr_grpo`), losses summed over tokens
(`token_sum`), no KL or entropy term, every group trained, no correction. `algorithm: NAME` (the
section's `preset`) sets several together from `kitchen.families.rl.presets` when the config is
loaded (recipe defaults < preset < YAML < key=value).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from kitchen.engine.backends import get_backend_spec
from kitchen.engine.config.run import Count
from kitchen.engine.config.sections import Section
from kitchen.engine.losses import get_loss_fn, rl_loss_names
from kitchen.engine.plugins import ExtensionPoint
from kitchen.families.rl.presets import ALGORITHM_NAMES, ALGORITHM_PRESETS, AlgorithmName
from train_core.rl.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    ScaleRewards,
    get_advantage_estimator,
    register_estimator,
)
from train_core.rl.kl_estimators import KL_ESTIMATORS, kl_estimator_name
from train_core.rl.overlong import default_buffer_tokens
from train_core.rl.policy_objective import AggregationMode, MISLevel, PolicyObjective, RolloutCorrection, TISLevel


def _check_estimator(name: str, obj: object) -> AdvantageEstimator:
    if not callable(obj):
        raise TypeError(f"is not an advantage estimator `(rewards_P, lengths_P, **options) -> advantages_P` ({obj!r})")
    return obj  # a callable: its shape is checked when it runs


ESTIMATORS: ExtensionPoint[AdvantageEstimator] = ExtensionPoint(
    "kitchen.advantage_estimators", "advantage estimator", _check_estimator, register_estimator
)
"""Advantage estimators by name (`train_core.rl.advantages`), plugins' included: each entry point is
registered into train_core's table on first use, where `compute_advantages` finds it."""


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
    (`train_core.rl.policy_objective.correct_off_policy`)."""

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


class AlgorithmSettings(Section):
    """Config section `algorithm`: what each RL update optimises, from the rewards to the loss.
    A plain value names a preset: `algorithm: dapo` is `algorithm: {preset: dapo}`."""

    FLAT: ClassVar[Mapping[str, str]] = {"preset": "algorithm"}
    SHORTHAND: ClassVar[str | None] = "preset"

    preset: AlgorithmName | None = Field(
        None,
        description="a published algorithm's settings as defaults for the keys below: "
        + ", ".join(ALGORITHM_NAMES)
        + " (kitchen.families.rl.presets); any key set in the YAML or as key=value still wins",
    )
    loss_fn: str = Field(
        "importance_sampling",
        description="policy-gradient loss: importance_sampling, ppo, cispo, dro, gspo, sapo, vespo, decoupled_ppo, "
        "or a plugin's (kitchen.losses)",
    )
    loss_fn_config: dict[str, float] | None = Field(None, description="e.g. ppo/gspo clip thresholds, dro beta")
    advantage_estimator: str = Field(
        "dr_grpo",
        description="advantages from total rewards (train_core.rl.advantages): "
        + ", ".join(ADVANTAGE_ESTIMATORS)
        + "; dr_grpo = group-mean centring, kitchen's default",
    )
    scale_rewards: ScaleRewards | None = Field(
        None, description="grpo only: divide by the std of the group, of the batch, or not at all; default group"
    )
    remove_constant_reward_groups: bool = Field(
        False, description="leave out groups whose samples all got the same reward (no advantage to learn from)"
    )
    loss_aggregation: AggregationMode = Field(
        "token_sum",
        description="how token losses become the step's loss (verl's loss_agg_mode; token_sum = Tinker's sum)",
    )
    loss_aggregation_tokens: Count | None = Field(
        None, description="seq_mean_token_sum_norm's constant normaliser; default sampling.max_tokens"
    )
    kl_penalty_coef: float = Field(0.0, ge=0, description="KL penalty against the reference model; 0 = off")
    kl_discount_factor: float = Field(
        0.0, ge=0, lt=1, description="KL penalty as a discounted sum over later tokens; 0 = per token"
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
    top_entropy_quantile: float = Field(
        1.0,
        ge=0,
        le=1,
        description="TRL's rho: the policy loss only on action tokens whose entropy is in the batch's top rho "
        "quantile (0.2 in the paper; 1 = every token); needs the local backend",
    )
    dynamic_sampling: DynamicSampling | None = Field(None, description="DAPO's dynamic sampling; unset = off")
    overlong_buffer: OverlongBuffer | None = Field(None, description="DAPO's soft overlong punishment; unset = off")
    overlong_filter: bool = Field(False, description="leave replies cut at sampling.max_tokens out of the loss")
    rollout_correction: RolloutCorrectionSettings | None = Field(
        None, description="TIS / MIS for sampler-trainer mismatch; unset = off (the mismatch is still logged)"
    )

    @field_validator("loss_fn")
    @classmethod
    def _policy_gradient_loss(cls, name: str) -> str:
        get_loss_fn(name)  # an unknown name is an InvalidInputError (a ValueError): a field error
        if name not in rl_loss_names():
            raise ValueError(f"{name} is not a policy-gradient loss; RL needs one of {', '.join(rl_loss_names())}")
        return name

    @field_validator("loss_fn_config")
    @classmethod
    def _loss_config_fits(cls, config: dict[str, float] | None, info: ValidationInfo) -> dict[str, float] | None:
        name = info.data.get("loss_fn")
        if name is not None:
            get_loss_fn(name).resolve_config(config)
        return config

    @field_validator("advantage_estimator")
    @classmethod
    def _known_estimator(cls, name: str) -> str:
        ESTIMATORS.load()
        get_advantage_estimator(name)
        return name

    @field_validator("kl_loss_estimator")
    @classmethod
    def _known_kl_estimator(cls, name: str) -> str:
        kl_estimator_name(name)
        return name

    @model_validator(mode="after")
    def _consistent(self) -> AlgorithmSettings:
        if self.scale_rewards is not None and self.advantage_estimator != "grpo":
            raise ValueError(f"scale_rewards applies to advantage_estimator grpo, not {self.advantage_estimator!r}")
        clashes = sorted(set(self.clip_config()) & set(self.loss_fn_config or {}))
        if clashes:
            raise ValueError(f"loss_fn_config {clashes} and clip_ratio_low/high/c set the same clip; set one of them")
        correction = self.correction()
        corrects = correction is not None and bool(correction.tis or correction.mis)
        if corrects and get_loss_fn(self.loss_fn).scaled_by != "advantages":
            raise ValueError(f"rollout_correction needs a loss scaled by the advantages, not {self.loss_fn!r}")
        return self

    @classmethod
    def preset_defaults(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The named preset's settings for an `algorithm` section being loaded, or none."""
        name = data.get("preset")
        preset = ALGORITHM_PRESETS.get(name) if isinstance(name, str) else None
        return {} if preset is None else {"preset": name, **preset.settings}

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

    def policy_loss_config(self) -> dict[str, float] | None:
        """`loss_fn_config` with `clip_ratio_low/high/c` applied; None when neither sets anything."""
        merged = {**(self.loss_fn_config or {}), **self.clip_config()}
        return merged or None

    def policy_objective(self, max_tokens: int, minibatches: int = 1) -> PolicyObjective:
        """What each optimizer step minimises (`train_core.rl.policy_objective`); `max_tokens`
        (the `sampling` section's) is the default constant of `seq_mean_token_sum_norm`."""
        return PolicyObjective(
            self.loss_fn,
            self.policy_loss_config(),
            self.loss_aggregation,
            float(self.loss_aggregation_tokens or max_tokens),
            self.kl_loss_coef,
            self.kl_loss_estimator,
            self.entropy_coeff,
            minibatches,
            self.top_entropy_quantile,
        )

    def custom_route_reasons(self, backend: str, max_tokens: int) -> list[str]:
        """Why the update goes through `forward_backward_custom` on `backend` (a KL term, an
        entropy bonus, or on a backend that runs only its own built-ins, such as the Tinker
        service, a loss or config key it does not take); empty: the built-in loss runs it."""
        builtin_only = get_backend_spec(backend).supported_losses is not None
        return self.policy_objective(max_tokens).custom_route_reasons(service=builtin_only)

    def correction(self) -> RolloutCorrection | None:
        return None if self.rollout_correction is None else self.rollout_correction.correction()

    def overlong_buffer_tokens(self, max_tokens: int) -> int:
        """The overlong buffer L_c: as set, else DAPO's fifth of `max_tokens`."""
        assert self.overlong_buffer is not None
        return self.overlong_buffer.tokens or default_buffer_tokens(max_tokens)
