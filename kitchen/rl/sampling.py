"""RL sampling: the recipe's task, each step's env groups, rollouts with the current sampler,
held-out reward, transcripts, rollout metrics, and refreshing the sampler after an update."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kitchen.context import Context
from kitchen.errors import DataError
from kitchen.ports import Tokenizer
from kitchen.requests import score_targets
from kitchen.stage import Stage
from kitchen.stages.setup import message_roles
from kitchen.workflow import ConfigPredicate
from train_core.rl.metrics import compute_kl_pre_post, rollout_failure_metrics, rollout_metrics
from train_core.rl.rollouts import (
    DroppedGroup,
    RolloutFailure,
    RolloutLimits,
    RolloutOptions,
    SampledGroup,
    kept_groups,
    sample_group,
)
from train_core.rl.task import DataCheck, RLTaskFactory
from train_core.types import SamplingParams

ROLLOUT_KEYS = (
    "max_tokens",
    "temperature",
    "seed",
    "max_episode_turns",
    "max_episode_tokens",
    "episode_timeout_s",
    "max_context_tokens",
    "termination_reward",
    "rollout_failure",
)
"""The config keys `rollout_params` and `rollout_options` read, plus the seed every sampling stage
derives seeds from."""


def rollout_params(ctx: Context) -> SamplingParams:
    """Sampling settings from the RL config; each env's stop condition is added per call."""
    return SamplingParams(max_tokens=ctx.config.max_tokens, temperature=ctx.config.temperature)


def rollout_options(ctx: Context) -> RolloutOptions:
    """Episode limits, termination reward and failure policy from the RL config."""
    config = ctx.config
    failure = config.rollout_failure
    return RolloutOptions(
        limits=RolloutLimits(
            max_turns=config.max_episode_turns,
            max_tokens=config.max_episode_tokens,
            timeout_s=config.episode_timeout_s,
            max_context_tokens=config.max_context_tokens,
        ),
        termination_reward=config.termination_reward,
        failure=RolloutFailure(failure.policy, failure.retries, failure.min_group_size),
    )


def note_dropped(ctx: Context, dropped: list[DroppedGroup]) -> None:
    for group in dropped:
        ctx.log.warning("rollout.group_dropped", step=ctx.step, tags=group.builder.logging_tags(), error=group.error)


def _eval_due(ctx: Context) -> bool:
    period = int(ctx.full_config.eval_every or 0)
    return period > 0 and (ctx.step % period == 0 or ctx.step + 1 == ctx.total_steps)


eval_due = ConfigPredicate("every eval_every steps and at the last step, before the update", ("eval_every",), _eval_due)
"""Before the update of every `eval_every`-th step (step 0 included) and of the last step."""


class BuildRLTask(Stage):
    """The recipe's envs, held-out set and demonstrations, built up front so bad data fails before
    any training; also fixes the number of RL steps (`num_batches`)."""

    reads = ("renderer",)
    writes = ("rl_task", "num_steps")
    config_keys = ("num_batches",)

    def __init__(self, factory: RLTaskFactory, check_data: DataCheck | None = None, name: str | None = None) -> None:
        super().__init__(name)
        self.factory = factory
        self.check_data = check_data

    def check_inputs(self, config: Any) -> None:
        if self.check_data is not None:
            self.check_data(config, message_roles(config))

    async def run(self, ctx: Context) -> None:
        task = self.factory(ctx.full_config, ctx["renderer"])
        if len(task.train) == 0:
            raise DataError("the RL dataset has no batches")
        ctx["rl_task"] = task
        ctx["num_steps"] = ctx.config.num_batches
        ctx.log.info("rl_task.built", batches=len(task.train), eval_groups=len(task.eval_builders))


class GetEnvGroups(Stage):
    """The env-group builders of the current step: batch `step` of the dataset (cycled), so a
    resumed run sees exactly the problems an uninterrupted run would."""

    reads = ("rl_task",)
    writes = ("env_group_builders",)

    async def run(self, ctx: Context) -> None:
        dataset = ctx["rl_task"].train
        ctx["env_group_builders"] = list(dataset.get_batch(ctx.step % len(dataset)))


class DoRollouts(Stage):
    """Roll out every env group of the step with the current sampler, all groups concurrently.

    Seeds derive from (seed, step, group index), so a resumed run samples what an uninterrupted
    one would have.
    """

    reads = ("env_group_builders", "sampling_client", "sampler_step")
    writes = ("sampled_groups",)
    calls = ("SamplingClient.sample",)
    config_keys = ROLLOUT_KEYS

    async def run(self, ctx: Context) -> None:
        sampler, sampler_step = ctx["sampling_client"], ctx["sampler_step"]
        params, options = rollout_params(ctx), rollout_options(ctx)
        results = await asyncio.gather(
            *(
                sample_group(
                    builder, sampler, sampler_step, params, ("train", ctx.config.seed, ctx.step, index), options
                )
                for index, builder in enumerate(ctx["env_group_builders"])
            )
        )
        groups, dropped = kept_groups(results)
        note_dropped(ctx, dropped)
        ctx["sampled_groups"] = groups
        ctx.record(rollout_failure_metrics(groups, dropped))


class RecordRolloutMetrics(Stage):
    """Reward, length and env metrics of every group sampled for the step (`env/all/...`,
    `env/{tag}/...`), whether or not it is kept for training."""

    reads = ("sampled_groups",)

    async def run(self, ctx: Context) -> None:
        if not ctx["sampled_groups"]:
            ctx.log.warning("rollout_metrics.skipped", step=ctx.step, reason="no group was kept")
            return
        ctx.record(rollout_metrics(ctx["sampled_groups"]))


class EvaluateRewards(Stage):
    """Reward on the task's held-out env groups with the current (pre-update) sampler, logged as
    `eval/all/reward/total` and friends (`eval/{tag}/...` per logging tag). With `client_key` and
    `prefix`, another model's reward on them (e.g. a teacher's, as `teacher_eval/...`)."""

    calls = ("SamplingClient.sample",)
    config_keys = ROLLOUT_KEYS

    def __init__(self, client_key: str = "sampling_client", prefix: str = "eval", name: str | None = None) -> None:
        super().__init__(name)
        self.client_key, self.prefix = client_key, prefix
        own = client_key == "sampling_client"
        self.reads = ("rl_task", client_key, *(("sampler_step",) if own else ()))

    async def run(self, ctx: Context) -> None:
        builders = ctx["rl_task"].eval_builders
        if not builders:
            return
        sampler = ctx[self.client_key]
        sampler_step = ctx["sampler_step"] if "sampler_step" in self.reads else 0
        params, options = rollout_params(ctx), rollout_options(ctx)
        results = await asyncio.gather(
            *(
                sample_group(
                    builder, sampler, sampler_step, params, ("eval", ctx.config.seed, ctx.step, index), options
                )
                for index, builder in enumerate(builders)
            )
        )
        groups, dropped = kept_groups(results)
        note_dropped(ctx, dropped)
        if groups:
            ctx.record(rollout_metrics(groups, prefix=self.prefix))


def group_transcripts(group: SampledGroup, tokenizer: Tokenizer, step: int, group_index: int) -> list[dict[str, Any]]:
    """One JSON-ready record per trajectory: each turn's observation and action as text."""
    records = []
    rewards_G = group.trajectories.get_total_rewards()
    for traj_index, traj in enumerate(group.trajectories.trajectories_G):
        turns = [
            {
                "observation": tokenizer.decode(t.ob.to_ints()),
                "action": tokenizer.decode(t.ac.tokens),
                "stop_reason": t.ac.stop_reason,
                "parse_ok": t.parse_ok,
                "reward": t.reward,
                "metrics": t.metrics,
            }
            for t in traj.transitions
        ]
        records.append(
            {
                "step": step,
                "group": group_index,
                "trajectory": traj_index,
                "sampler_step": group.sampler_step,
                "tags": group.builder.logging_tags(),
                "total_reward": rewards_G[traj_index],
                "episode_stop": traj.stop_reason,
                "turns": turns,
            }
        )
    return records


class WriteTranscripts(Stage):
    """The first `transcript_groups` groups of the step as text, to `rollouts/step_{step:06d}.jsonl`."""

    reads = ("sampled_groups", "tokenizer")
    config_keys = ("transcript_groups",)

    async def run(self, ctx: Context) -> None:
        count = ctx.config.transcript_groups
        if ctx.run_dir is None or count == 0:
            return
        folder = ctx.run_dir / "rollouts"
        folder.mkdir(exist_ok=True)
        lines = [
            json.dumps(record)
            for index, group in enumerate(ctx["sampled_groups"][:count])
            for record in group_transcripts(group, ctx["tokenizer"], ctx.step, index)
        ]
        (folder / f"step_{ctx.step:06d}.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def weight_sync_metrics(client: object) -> dict[str, float]:
    """`time/weight_sync`: the seconds a backend with a separate rollout engine (the local
    backend's vLLM) spent moving new weights into it, where the sampling client says."""
    seconds = getattr(client, "weight_sync_s", None)
    return {} if seconds is None else {"time/weight_sync": float(seconds)}


class RefreshSampler(Stage):
    """A sampling client on the training client's current weights, and the number of optimizer
    steps those weights have taken (`sampler_step`, the age that off-policy filtering uses).

    Inside the step loop it runs after the step's update, so the count is `step + 1`.
    """

    reads = ("training_client",)
    writes = ("sampling_client", "sampler_step")
    calls = ("TrainingClient.save_weights_and_get_sampling_client",)

    def __init__(self, after_update: bool = True, name: str | None = None) -> None:
        super().__init__(name or ("refresh_sampler" if after_update else "initial_sampler"))
        self.after_update = after_update

    async def run(self, ctx: Context) -> None:
        ctx["sampling_client"] = await ctx["training_client"].save_weights_and_get_sampling_client()
        ctx["sampler_step"] = ctx.step + 1 if self.after_update else ctx.step
        ctx.record(weight_sync_metrics(ctx["sampling_client"]))


class PostUpdateKL(Stage):
    """How far the step's update moved the policy on the step's own tokens: the trained datums
    scored by the refreshed sampler (one `compute_logprobs` per datum, all at once), compared with
    their sampling logprobs (`optim/kl_pre_post`, `optim/kl_pre_post_v2`). Runs after
    `RefreshSampler` when `post_update_kl` is on."""

    reads = ("trained_data", "sampling_client")
    calls = ("SamplingClient.compute_logprobs",)

    async def run(self, ctx: Context) -> None:
        data_D = ctx["trained_data"]
        if data_D:
            ctx.record(compute_kl_pre_post(data_D, await score_targets(ctx["sampling_client"], data_D)))


post_update_kl_on = ConfigPredicate(
    "post_update_kl is on", ("post_update_kl",), lambda ctx: bool(ctx.full_config.post_update_kl)
)
