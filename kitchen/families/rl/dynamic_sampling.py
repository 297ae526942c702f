"""DAPO's dynamic sampling in the RL workflow (`dynamic_sampling: {max_rounds: N}`): groups whose
rewards are all equal are left out of the update and more groups are sampled until the step has
`groups_per_batch` informative ones or `max_rounds` rounds' worth were sampled
(`train_core.rl.dynamic_sampling.BatchFill` keeps the count).

Extra rounds draw the dataset's following batches (round r of step s: batch s + r, as verl's
dataloader goes on), so a run is reproducible and resumable. The rollout metrics (`env/...`) are
unfiltered: in sync and stream mode the step's own batch (the policy's reward as a run without
dynamic sampling would log it), in async mode every group the trainer took. Sync mode fills in
`FillInformativeBatch`; stream-minibatch mode replaces constant groups as they finish
(`kitchen.families.rl.stream`); async mode takes more groups (`kitchen.families.rl.async_mode`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kitchen.engine.config.run import RunConfig
from kitchen.engine.context import Context
from kitchen.engine.ports import SamplingClient
from kitchen.engine.stage import Stage
from kitchen.families.common.settings import SamplingSettings
from kitchen.families.rl.algorithm_settings import AlgorithmSettings, DynamicSampling
from kitchen.families.rl.settings import EpisodeSettings, RLLoopSettings
from kitchen.families.rl.step import note_dropped, rollout_options, rollout_params
from train_core.rl.dynamic_sampling import BatchFill
from train_core.rl.rollouts import SampledGroup, kept_groups, sample_group
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder, Metrics, has_reward_spread


def is_informative(group: SampledGroup) -> bool:
    """The group's total rewards differ (it has a nonzero advantage to learn from)."""
    return has_reward_spread(group.trajectories.get_total_rewards())


def sampled_batch_fill(groups_per_batch: int, dynamic: DynamicSampling) -> BatchFill[SampledGroup]:
    return BatchFill(groups_per_batch, dynamic.max_rounds, lambda g: g.trajectories.get_total_rewards())


def extra_round_builders(rl_task: RLTask, step: int, round_index: int) -> list[EnvGroupBuilder]:
    """The env groups of extra round `round_index` (>= 1) of `step`: the dataset's batch step + round."""
    dataset = rl_task.train
    return list(dataset.get_batch((step + round_index) % len(dataset)))


def fill_metrics(sampled: int, dropped: int, kept: int, target: int) -> Metrics:
    """`dynamic_sampling/*` for modes that sample group by group: rounds as batches' worth sampled."""
    return {
        "dynamic_sampling/rounds": sampled / target,
        "dynamic_sampling/groups_sampled": float(sampled),
        "dynamic_sampling/groups_dropped": float(dropped),
        "dynamic_sampling/fill": min(kept, target) / target,
    }


@dataclass(frozen=True)
class FilledGroups:
    filled_groups: list[SampledGroup]


class FillInformativeBatch(Stage):
    """Sync mode's dynamic sampling: the step's informative groups, topped up by further rounds
    (rolled out concurrently, one round at a time) until `groups_per_batch` are kept or the round
    budget is spent; surplus from the last round is left out. Logs `dynamic_sampling/rounds`,
    `groups_sampled`, `groups_dropped` and `fill`."""

    calls = (SamplingClient.sample,)

    async def run(
        self,
        ctx: Context,
        sampled_groups: list[SampledGroup],
        rl_task: RLTask,
        sampling_client: SamplingClient,
        sampler_step: int,
        rl: RLLoopSettings,
        algorithm: AlgorithmSettings,
        sampling: SamplingSettings,
        episode: EpisodeSettings,
        run: RunConfig,
    ) -> FilledGroups:
        assert algorithm.dynamic_sampling is not None  # the stage is in the workflow only with it
        fill = sampled_batch_fill(rl.groups_per_batch, algorithm.dynamic_sampling).add_round(sampled_groups)
        params, options = rollout_params(sampling), rollout_options(episode)
        while not fill.done:
            round_index = fill.rounds
            builders = extra_round_builders(rl_task, ctx.step, round_index)
            results = await asyncio.gather(
                *(
                    sample_group(
                        b,
                        sampling_client,
                        sampler_step,
                        params,
                        ("dynamic_sampling", run.seed, ctx.step, round_index, i),
                        options,
                    )
                    for i, b in enumerate(builders)
                )
            )
            groups, dropped = kept_groups(results)
            note_dropped(ctx, dropped)
            fill = fill.add_round(groups)
        ctx.record(fill.metrics())
        return FilledGroups(fill.batch())
