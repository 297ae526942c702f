"""The RL workflow's settings; RL recipes subclass them (names as in the Python original).

One `groups_per_batch` sizes a step in every mode; the mode sections hold only what is specific
to their mode.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from kitchen.engine.backends import get_backend_spec
from kitchen.engine.config.loading import Count, NonNegative, Rate, RunConfig, defaults
from kitchen.engine.losses import get_loss_fn, rl_loss_names
from kitchen.families.common.settings import OptimizerSettings, RendererSettings
from kitchen.families.rl.algorithm_settings import RLAlgorithmSettings
from kitchen.families.rl.presets import ALGORITHM_PRESETS
from train_core.rl.off_policy import RolloutCorrection
from train_core.rl.overlong import default_buffer_tokens
from train_core.rl.policy_objective import PolicyObjective
from train_core.rl.rollouts import FailurePolicy

RLMode = Literal["sync", "stream_minibatch", "async"]


class StreamMinibatch(BaseModel):
    """Train on minibatches as their groups finish sampling, one optimizer step per substep."""

    model_config = ConfigDict(extra="forbid")

    num_minibatches: Count = Field(..., description="forward_backward calls per optimizer step")


class AsyncMode(BaseModel):
    """Off-policy training: sampling workers run on while the trainer trains."""

    model_config = ConfigDict(extra="forbid")

    max_steps_off_policy: NonNegative = Field(
        ..., description="admission bound: a group starts only if it is trained within this many steps of its weights"
    )
    follow_weight_updates: bool = Field(
        True,
        description=(
            "in-flight weight updates: each sampling request takes the newest weights and, where the backend "
            "can (noop, local), a generation switches to new weights between decode steps; tokens carry their version"
        ),
    )
    num_workers: int | None = Field(
        None, ge=1, description="concurrent sampling workers, one group each; default groups_per_batch"
    )


class RolloutFailureSettings(BaseModel):
    """What an exception in one group's env or sampling call does (see `RolloutFailure`)."""

    model_config = ConfigDict(extra="forbid")

    policy: FailurePolicy = Field(
        "fail_fast", description="fail_fast (the run fails), retry (the group), min_viable_group (drop failed members)"
    )
    retries: NonNegative = Field(2, description="retry: times a failed group is rolled out again")
    min_group_size: Count = Field(2, description="min_viable_group: finished members a group needs to be kept")


@defaults(lr_schedule="constant")
class RLSettings(RendererSettings, OptimizerSettings, RLAlgorithmSettings):
    MOVED_KEYS: ClassVar[dict[str, str]] = {
        "stream_minibatch.groups_per_batch": "groups_per_batch",
        "async_config.groups_per_batch": "groups_per_batch (and async_config.num_workers for the worker count)",
    }

    group_size: Count = Field(8, description="samples per problem; advantages are centred within a group")
    groups_per_batch: Count = Field(16, description="problems (env groups) trained per step, in every mode")
    num_batches: Count = Field(40, description="RL steps; datasets shorter than this cycle")
    max_tokens: Count = Field(16, description="sampled tokens per turn")
    temperature: float = Field(1.0, ge=0, description="sampling temperature of rollouts")
    loss_fn: str = Field(
        "importance_sampling",
        description="policy-gradient loss: importance_sampling, ppo, cispo, dro, gspo, or a plugin's (kitchen.losses)",
    )
    loss_fn_config: dict[str, float] | None = Field(None, description="e.g. ppo/gspo clip thresholds, dro beta")
    kl_penalty_coef: float = Field(0.0, ge=0, description="KL penalty against the reference model; 0 = off")
    kl_discount_factor: float = Field(
        0.0, ge=0, lt=1, description="KL penalty as a discounted sum over later tokens; 0 = per token"
    )
    num_substeps: Count = Field(1, description="optimizer steps per batch")
    remove_constant_reward_groups: bool = Field(
        False, description="leave out groups whose samples all got the same reward (no advantage to learn from)"
    )
    save_every: NonNegative = Field(20, description="checkpoint every N steps; 0 = only the final one")
    eval_every: NonNegative = Field(20, description="held-out reward every N steps (and at the last); 0 = never")
    transcript_groups: NonNegative = Field(2, description="groups per step written to rollouts/step_*.jsonl")
    stream_minibatch: StreamMinibatch | None = Field(
        None, description="stream-minibatch mode: train each minibatch as soon as its groups are sampled"
    )
    async_config: AsyncMode | None = Field(
        None, description="async mode: sampling workers run beside the trainer, off-policy up to a bound"
    )
    max_episode_turns: Count | None = Field(None, description="stop an episode after this many turns (max_turns)")
    max_episode_tokens: Count | None = Field(
        None, description="stop an episode once its turns sampled this many tokens (max_tokens)"
    )
    episode_timeout_s: Rate | None = Field(None, description="wall-clock budget of one episode, seconds (timeout)")
    max_context_tokens: Count | None = Field(
        None, description="an observation longer than this ends the episode unsampled (overflow)"
    )
    termination_reward: float | Literal["zero"] | None = Field(
        None,
        description="for limit-stopped episodes: a number added to the total reward, or 'zero': the total "
        "becomes min(total, 0) (a positive total is zeroed, a negative one kept)",
    )
    rollout_failure: RolloutFailureSettings = Field(
        default_factory=RolloutFailureSettings, description="what an exception in a group's env or sampling does"
    )
    parse_error_policy: Literal["train", "mask"] = Field(
        "train", description="mask: turns whose reply failed to parse get advantage 0 and are not trained"
    )
    post_update_kl: bool = Field(
        False, description="log optim/kl_pre_post: the step's tokens scored again with the updated sampler"
    )
    warm_start_steps: NonNegative = Field(0, description="supervised steps on demonstrations before RL (fresh runs)")
    warm_start_batch_size: Count = Field(32, description="demonstrations per warm-start step")
    warm_start_learning_rate: Rate = Field(3e-3, description="learning rate of the warm start")

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

    @field_validator("stream_minibatch")
    @classmethod
    def _minibatches_fit(cls, stream: StreamMinibatch | None, info: ValidationInfo) -> StreamMinibatch | None:
        groups, substeps = info.data.get("groups_per_batch"), info.data.get("num_substeps")
        if stream is None or groups is None or substeps is None:
            return stream
        if groups % (substeps * stream.num_minibatches):
            raise ValueError(
                f"groups_per_batch ({groups}) must split evenly into num_substeps x num_minibatches = "
                f"{substeps * stream.num_minibatches} minibatches"
            )
        return stream

    @field_validator("async_config")
    @classmethod
    def _one_mode(cls, async_config: AsyncMode | None, info: ValidationInfo) -> AsyncMode | None:
        if async_config is not None and info.data.get("stream_minibatch") is not None:
            raise ValueError("async_config and stream_minibatch select different modes; set at most one")
        return async_config

    @property
    def mode(self) -> RLMode:
        if self.async_config is not None:
            return "async"
        return "stream_minibatch" if self.stream_minibatch is not None else "sync"

    @model_validator(mode="after")
    def _algorithm_fits_the_loss(self) -> RLSettings:
        """The loss with the clip keys, the aggregation, KL and entropy terms, and the corrections
        are checked together when the config loads (train_core's errors are ValueErrors)."""
        clashes = sorted(set(self.clip_config()) & set(self.loss_fn_config or {}))
        if clashes:
            raise ValueError(f"loss_fn_config {clashes} and clip_ratio_low/high/c set the same clip; set one of them")
        self.policy_objective()  # checks the loss config, aggregation and terms together
        correction = self.correction()
        corrects = correction is not None and bool(correction.tis or correction.mis)
        if corrects and get_loss_fn(self.loss_fn).scaled_by != "advantages":
            raise ValueError(f"rollout_correction needs a loss scaled by the advantages, not {self.loss_fn!r}")
        buffer = self.overlong_buffer.tokens if self.overlong_buffer is not None else None
        if buffer is not None and buffer > self.max_tokens:
            raise ValueError(f"overlong_buffer.tokens ({buffer}) must be at most max_tokens ({self.max_tokens})")
        return self

    def policy_loss_config(self) -> dict[str, float] | None:
        """`loss_fn_config` with `clip_ratio_low/high/c` applied; None when neither sets anything."""
        merged = {**(self.loss_fn_config or {}), **self.clip_config()}
        return merged or None

    def policy_objective(self, minibatches: int = 1) -> PolicyObjective:
        """What each optimizer step minimises (`train_core.rl.policy_objective`), from these settings."""
        return PolicyObjective(
            self.loss_fn,
            self.policy_loss_config(),
            self.loss_aggregation,
            float(self.loss_aggregation_tokens or self.max_tokens),
            self.kl_loss_coef,
            self.kl_loss_estimator,
            self.entropy_coeff,
            minibatches,
        )

    def custom_route_reasons(self) -> list[str]:
        """Why the update goes through `forward_backward_custom` on the configured backend (a KL
        term, an entropy bonus, or on a backend that runs only its own built-ins, such as the Tinker
        service, a loss or config key it does not take); empty: the built-in loss runs it."""
        builtin_only = get_backend_spec(self.backend).supported_losses is not None
        return self.policy_objective().custom_route_reasons(service=builtin_only)

    def builtin_loss_fns(self) -> list[str]:
        """The losses sent to the backend's built-in forward_backward (what `kitchen validate`
        checks the backend runs): the policy loss unless the custom route takes it."""
        return [] if self.custom_route_reasons() else [self.loss_fn]

    def correction(self) -> RolloutCorrection | None:
        return None if self.rollout_correction is None else self.rollout_correction.correction()

    def overlong_buffer_tokens(self) -> int:
        """The overlong buffer L_c: as set, else DAPO's fifth of max_tokens."""
        assert self.overlong_buffer is not None
        return self.overlong_buffer.tokens or default_buffer_tokens(self.max_tokens)

    def resolved_summary(self) -> list[str]:
        """The RL algorithm as it will run: the preset (if any) and every algorithm key's value,
        the loss config with the clip keys applied."""
        source = ALGORITHM_PRESETS[self.algorithm].source if self.algorithm else "no preset"
        lines = [f"algorithm: {self.algorithm or '-'} ({source})"]
        values: dict[str, object] = {"loss_fn": self.loss_fn, "loss_fn_config": self.policy_loss_config()}
        own = [key for key in RLAlgorithmSettings.model_fields if key not in RunConfig.model_fields]
        values.update({key: getattr(self, key) for key in own if key != "algorithm"})
        values.update(mode=self.mode, kl_penalty_coef=self.kl_penalty_coef)
        return lines + [f"  {key} = {_shown(value)}" for key, value in values.items()]


def _shown(value: object) -> object:
    return value.model_dump() if isinstance(value, BaseModel) else value
