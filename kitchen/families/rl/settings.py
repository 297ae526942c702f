"""The RL family's settings: the `rl` section (how a step is sized and run: groups, steps, mode),
`episode` (limits of one episode and what a failure does), `warm_start`, with `sampling` and the
`algorithm` section (`kitchen.families.rl.algorithm_settings`); RL recipes subclass `RLSettings`
and add their `env`.

One `rl.groups_per_batch` sizes a step in every mode; the mode sections hold only what is specific
to their mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from kitchen.engine.config.loading import defaults
from kitchen.engine.config.run import Count, NonNegative, Rate
from kitchen.engine.config.sections import RUN_LENGTH, Section
from kitchen.families.common.settings import (
    HeldOutEval,
    OptimizerSettings,
    RendererSettings,
    SamplingSettings,
    TrainingSettings,
)
from kitchen.families.rl.algorithm_settings import AlgorithmSettings
from kitchen.families.rl.presets import ALGORITHM_PRESETS
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
        None, ge=1, description="concurrent sampling workers, one group each; default rl.groups_per_batch"
    )


class RLLoopSettings(Section):
    """Config section `rl`: how RL steps are sized and run (groups, steps, substeps) and in which
    mode (sync; `stream_minibatch`; `async_config`)."""

    group_size: Count = Field(8, description="samples per problem; advantages are centred within a group")
    groups_per_batch: Count = Field(16, description="problems (env groups) trained per step, in every mode")
    num_batches: Count = Field(
        40, description="RL steps; datasets shorter than this cycle", json_schema_extra=RUN_LENGTH
    )
    num_substeps: Count = Field(1, description="optimizer steps per batch")
    transcript_groups: NonNegative = Field(2, description="groups per step written to rollouts/step_*.jsonl")
    post_update_kl: bool = Field(
        False, description="log optim/kl_pre_post: the step's tokens scored again with the updated sampler"
    )
    stream_minibatch: StreamMinibatch | None = Field(
        None, description="stream-minibatch mode: train each minibatch as soon as its groups are sampled"
    )
    async_config: AsyncMode | None = Field(
        None, description="async mode: sampling workers run beside the trainer, off-policy up to a bound"
    )

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


class RolloutFailureSettings(BaseModel):
    """What an exception in one group's env or sampling call does (see `RolloutFailure`)."""

    model_config = ConfigDict(extra="forbid")

    policy: FailurePolicy = Field(
        "fail_fast", description="fail_fast (the run fails), retry (the group), min_viable_group (drop failed members)"
    )
    retries: NonNegative = Field(2, description="retry: times a failed group is rolled out again")
    min_group_size: Count = Field(2, description="min_viable_group: finished members a group needs to be kept")


class EpisodeSettings(Section):
    """Config section `episode`: the limits of one episode (a multi-turn rollout), the reward of
    one they stop, what a failing env or sampling call does, and replies that fail to parse."""

    FLAT: ClassVar[Mapping[str, str]] = {
        "max_turns": "max_episode_turns",
        "max_tokens": "max_episode_tokens",
        "timeout_s": "episode_timeout_s",
        "failure": "rollout_failure",
    }

    max_turns: Count | None = Field(None, description="stop an episode after this many turns (max_turns)")
    max_tokens: Count | None = Field(
        None, description="stop an episode once its turns sampled this many tokens (max_tokens)"
    )
    timeout_s: Rate | None = Field(None, description="wall-clock budget of one episode, seconds (timeout)")
    max_context_tokens: Count | None = Field(
        None, description="an observation longer than this ends the episode unsampled (overflow)"
    )
    termination_reward: float | Literal["zero"] | None = Field(
        None,
        description="for limit-stopped episodes: a number added to the total reward, or 'zero': the total "
        "becomes min(total, 0) (a positive total is zeroed, a negative one kept)",
    )
    failure: RolloutFailureSettings = Field(
        default_factory=RolloutFailureSettings, description="what an exception in a group's env or sampling does"
    )
    parse_error_policy: Literal["train", "mask"] = Field(
        "train", description="mask: turns whose reply failed to parse get advantage 0 and are not trained"
    )


class WarmStartSettings(Section):
    """Config section `warm_start`: supervised steps on the task's demonstrations before RL."""

    FLAT_PREFIX: ClassVar[str] = "warm_start_"

    steps: NonNegative = Field(0, description="supervised steps on demonstrations before RL (fresh runs)")
    batch_size: Count = Field(32, description="demonstrations per warm-start step")
    learning_rate: Rate = Field(3e-3, description="learning rate of the warm start")


@defaults(optimizer=OptimizerSettings(lr_schedule="constant"), eval=HeldOutEval(every=20))
class RLSettings(TrainingSettings, RendererSettings):
    """RL on a recipe's environment (its `env` section, or a task it builds): the run keys and the
    `optimizer`, `sampling`, `rl`, `algorithm`, `episode`, `warm_start`, `eval`, `checkpoint` sections."""

    MOVED_KEYS: ClassVar[dict[str, str]] = {
        "rl.stream_minibatch.groups_per_batch": "rl.groups_per_batch",
        "rl.async_config.groups_per_batch": "rl.groups_per_batch (and rl.async_config.num_workers for the workers)",
    }

    sampling: SamplingSettings = Field(default_factory=SamplingSettings, description="how rollouts sample each turn")
    rl: RLLoopSettings = Field(default_factory=RLLoopSettings, description="the steps, their size and the mode")
    algorithm: AlgorithmSettings = Field(
        default_factory=AlgorithmSettings, description="what each update optimises, from rewards to the loss"
    )
    episode: EpisodeSettings = Field(default_factory=EpisodeSettings, description="the limits of one episode")
    warm_start: WarmStartSettings = Field(
        default_factory=WarmStartSettings, description="supervised steps on demonstrations before RL"
    )

    @model_validator(mode="after")
    def _algorithm_fits_the_sampling(self) -> RLSettings:
        """The loss with its aggregation, KL and entropy terms is checked together (train_core's
        errors are ValueErrors), against the sampled length."""
        self.algorithm.policy_objective(self.sampling.max_tokens)
        buffer = self.algorithm.overlong_buffer.tokens if self.algorithm.overlong_buffer is not None else None
        if buffer is not None and buffer > self.sampling.max_tokens:
            raise ValueError(
                f"algorithm.overlong_buffer.tokens ({buffer}) must be at most sampling.max_tokens "
                f"({self.sampling.max_tokens})"
            )
        return self

    @classmethod
    def preset(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The `algorithm.preset`'s settings for a config being loaded (see `load_config`)."""
        algorithm = data.get("algorithm")
        if not isinstance(algorithm, Mapping):
            return {}
        settings = AlgorithmSettings.preset_defaults(algorithm)
        return {"algorithm": dict(settings)} if settings else {}

    @property
    def mode(self) -> RLMode:
        return self.rl.mode

    def custom_route_reasons(self) -> list[str]:
        """Why the update goes through `forward_backward_custom` on the configured backend."""
        return self.algorithm.custom_route_reasons(self.backend, self.sampling.max_tokens)

    def builtin_loss_fns(self) -> list[str]:
        """The policy loss unless the custom route takes it (what `kitchen validate` checks the
        backend runs)."""
        return [] if self.custom_route_reasons() else [self.algorithm.loss_fn]

    def entropy_keys(self) -> list[str]:
        return [f"algorithm.{key}" for key in self.algorithm.policy_objective(self.sampling.max_tokens).entropy_keys]

    def resolved_summary(self) -> list[str]:
        """The RL algorithm as it will run: the preset (if any) and every algorithm key's value,
        the loss config with the clip keys applied."""
        algorithm = self.algorithm
        source = ALGORITHM_PRESETS[algorithm.preset].source if algorithm.preset else "no preset"
        lines = [f"algorithm: {algorithm.preset or '-'} ({source})"]
        values: dict[str, object] = {key: getattr(algorithm, key) for key in AlgorithmSettings.model_fields}
        values.pop("preset")
        values.update(loss_fn_config=algorithm.policy_loss_config(), mode=self.mode)
        return lines + [f"  algorithm.{key} = {_shown(value)}" for key, value in values.items()]


def _shown(value: object) -> object:
    return value.model_dump() if isinstance(value, BaseModel) else value
