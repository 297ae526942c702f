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
from train_core.rl.rollouts import kept_groups, rollout_metrics, sample_group
from train_core.rl.task import RLTask


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
        builders = rl_task.eval_builders
        if not builders:
            return
        params, options = rollout_params(sampling), rollout_options(episode)
        results = await asyncio.gather(
            *(
                sample_group(b, sampling_client, sampler_step, params, ("eval", run.seed, ctx.step, i), options)
                for i, b in enumerate(builders)
            )
        )
        groups, dropped = kept_groups(results)
        note_dropped(ctx, dropped)
        if groups:
            ctx.record(rollout_metrics(groups, prefix=self.prefix))
