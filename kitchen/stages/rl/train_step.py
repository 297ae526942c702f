from __future__ import annotations

from kitchen.context import Context
from kitchen.stage import Stage
from kitchen.stages.rl.step_metrics import train_step_metrics
from kitchen.stages.rl.train_chunks import split_evenly, train_in_chunks
from kitchen.stages.train_step import adam_params
from train_core.rl.data_processing import remove_mask


class RLTrainStep(Stage):
    """Train on the step's datums with the configured `loss_fn` / `loss_fn_config`, in
    `num_substeps` pipelined optimizer steps; then compare the training logprobs with the
    sampling ones (`optim/kl_sample_train_v1|v2`, `optim/entropy`).

    A batch with no datums (no trajectory had a token to train) skips the update.
    """

    reads = ("rl_data", "training_client")
    calls = ("TrainingClient.forward_backward", "TrainingClient.optim_step")

    async def run(self, ctx: Context) -> None:
        config = ctx.config
        data_D = ctx["rl_data"]
        if not data_D:
            ctx.log.warning("train_step.skipped", step=ctx.step, reason="no datums: no trajectory had a token to train")
            return
        chunks = split_evenly([remove_mask(d, config.loss_fn) for d in data_D], config.num_substeps)
        results = await train_in_chunks(
            ctx["training_client"], chunks, config.loss_fn, config.loss_fn_config, adam_params(ctx)
        )
        ctx.record(train_step_metrics(data_D, [fb for fb, _ in results], [optim for _, optim in results]))
