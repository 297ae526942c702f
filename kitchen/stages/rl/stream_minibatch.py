from __future__ import annotations

import asyncio

from kitchen.context import Context
from kitchen.errors import ConfigError
from kitchen.stage import Stage
from kitchen.stages.rl.kl_reference import penalize_kl
from kitchen.stages.rl.rollout_metrics import rollout_metrics
from kitchen.stages.rl.sampled_group import SampledGroup, rollout_params, sample_group
from kitchen.stages.rl.step_metrics import train_step_metrics
from kitchen.stages.train_step import adam_params
from train_core.rl.advantages import compute_advantages
from train_core.rl.data_processing import assemble_training_data, remove_constant_reward_groups, remove_mask
from train_core.types import Datum, ForwardBackwardOutput, OptimStepOutput


class StreamRolloutsAndTrain(Stage):
    """Stream-minibatch mode: roll out the step's groups concurrently and, as soon as a
    minibatch's worth of groups has finished (in finishing order), compute its advantages and
    submit its forward_backward without waiting for the rest. After `num_minibatches`
    minibatches one optim_step closes the substep; `num_substeps` substeps make the step.

    Advantages are per group, so a minibatch needs no other group's rollouts; the KL penalty's
    baseline is the minibatch's mean log-ratio.
    """

    writes = ("sampled_groups",)

    def __init__(self, kl_penalty: bool = False, name: str | None = None) -> None:
        super().__init__(name)
        self.kl_penalty = kl_penalty
        self.reads = (
            "env_group_builders",
            "sampling_client",
            "sampler_step",
            "training_client",
            *(("reference_client",) if kl_penalty else ()),
        )
        self.calls = (
            "SamplingClient.sample",
            "TrainingClient.forward_backward",
            "TrainingClient.optim_step",
            *(("SamplingClient.compute_logprobs",) if kl_penalty else ()),
        )

    async def run(self, ctx: Context) -> None:
        config = ctx.config
        builders = ctx["env_group_builders"]
        num_minibatches = config.stream_minibatch.num_minibatches
        per_step = config.num_substeps * num_minibatches
        if len(builders) % per_step:
            raise ConfigError(
                f"stream_minibatch: {len(builders)} groups in step {ctx.step} do not split into "
                f"num_substeps x num_minibatches = {per_step} minibatches"
            )
        per_minibatch = len(builders) // per_step
        sampler, sampler_step = ctx["sampling_client"], ctx["sampler_step"]
        params = rollout_params(config)
        tasks = [
            asyncio.create_task(sample_group(b, sampler, sampler_step, params, ("train", config.seed, ctx.step, i)))
            for i, b in enumerate(builders)
        ]
        finished = asyncio.as_completed(tasks)
        client, adam = ctx["training_client"], adam_params(ctx)
        sampled: list[SampledGroup] = []
        trained_D: list[Datum] = []
        fb_outputs: list[ForwardBackwardOutput] = []
        optim_outputs: list[OptimStepOutput] = []
        kl_bases: list[float] = []
        try:
            for _ in range(config.num_substeps):
                fb_futures = []
                for _ in range(num_minibatches):
                    minibatch = [await next(finished) for _ in range(per_minibatch)]
                    sampled += minibatch
                    data_D = self._minibatch_data(minibatch, config.remove_constant_reward_groups)
                    if data_D and self.kl_penalty:
                        data_D, kl_metrics = await penalize_kl(
                            data_D, ctx["reference_client"], config.kl_penalty_coef, config.kl_discount_factor
                        )
                        kl_bases.append(kl_metrics["kl_policy_base"])
                    if data_D:
                        fb_futures.append(
                            await client.forward_backward(
                                [remove_mask(d, config.loss_fn) for d in data_D], config.loss_fn, config.loss_fn_config
                            )
                        )
                        trained_D += data_D
                if not fb_futures:
                    continue  # no gradient this substep: an Adam step would still move the weights
                optim_future = await client.optim_step(adam)
                fb_outputs += [await future for future in fb_futures]
                optim_outputs.append(await optim_future)
        finally:
            for task in tasks:
                task.cancel()
        ctx["sampled_groups"] = sampled
        ctx.record(rollout_metrics(sampled))
        ctx.record({"num_datums": len(trained_D)})
        if kl_bases:
            ctx.record({"kl_policy_base": sum(kl_bases) / len(kl_bases)})
        if trained_D:
            ctx.record(train_step_metrics(trained_D, fb_outputs, optim_outputs))

    @staticmethod
    def _minibatch_data(minibatch: list[SampledGroup], remove_constant: bool) -> list[Datum]:
        groups_P = [g.trajectories for g in minibatch]
        if remove_constant:
            groups_P = remove_constant_reward_groups(groups_P)
        data_D, _ = assemble_training_data(groups_P, compute_advantages(groups_P))
        return data_D
