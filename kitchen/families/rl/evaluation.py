"""Held-out reward: the task's evaluation env groups rolled out with the current (pre-update)
sampler every `eval.every` steps, and the same for another model (a teacher) once."""

from __future__ import annotations

import asyncio

from kitchen.engine.config.run import RunConfig
from kitchen.engine.context import Context
from kitchen.engine.ports import SamplingClient
from kitchen.engine.stage import Stage
from kitchen.families.common.settings import SamplingSettings
from kitchen.families.rl.settings import EpisodeSettings
from kitchen.families.rl.step import note_dropped, rollout_options, rollout_params
from train_core.rl.rollouts import DroppedGroup, SampledGroup, kept_groups, rollout_metrics, sample_group
from train_core.rl.task import RLTask


async def roll_out_held_out(
    rl_task: RLTask,
    client: SamplingClient,
    sampler_step: int,
    sampling: SamplingSettings,
    episode: EpisodeSettings,
    seed_key: tuple[object, ...],
) -> tuple[list[SampledGroup], list[DroppedGroup]]:
    """Every held-out env group of the task rolled out with `client`, all at once (a backend
    batches them), as the `sampling` and `episode` sections say; each group's seed derives from
    `seed_key` and its index. The groups kept, and those dropped."""
    params, options = rollout_params(sampling), rollout_options(episode)
    results = await asyncio.gather(
        *(
            sample_group(builder, client, sampler_step, params, (*seed_key, index), options)
            for index, builder in enumerate(rl_task.eval_builders)
        )
    )
    return kept_groups(results)


class EvaluateRewards(Stage):
    """Reward on the task's held-out env groups with the current (pre-update) sampler, logged as
    `eval/all/reward/total` and friends (`eval/{tag}/...` per logging tag). With
    `keys={"sampling_client": ...}` and `prefix`, another model's reward on them (e.g. a
    teacher's, as `teacher_eval/...`)."""

    calls = (SamplingClient.sample,)

    def __init__(self, prefix: str = "eval", name: str | None = None, client_key: str | None = None) -> None:
        super().__init__(name, keys={"sampling_client": client_key} if client_key else None)
        self.prefix = prefix

    async def run(
        self,
        ctx: Context,
        rl_task: RLTask,
        sampling_client: SamplingClient,
        sampling: SamplingSettings,
        episode: EpisodeSettings,
        run: RunConfig,
        sampler_step: int = 0,
    ) -> None:
        groups, dropped = await roll_out_held_out(
            rl_task, sampling_client, sampler_step, sampling, episode, ("eval", run.seed, ctx.step)
        )
        note_dropped(ctx, dropped)
        if groups:
            ctx.record(rollout_metrics(groups, prefix=self.prefix))
