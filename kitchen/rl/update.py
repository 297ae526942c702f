"""The RL update, the same stages in every mode: group-centred advantages, datum assembly, the
advantage adjusters a workflow slots in (e.g. a KL penalty), and the policy-gradient train step.

Sync and async modes run them once per step on the whole batch; stream-minibatch mode runs them
once per minibatch (`kitchen.rl.stream`), so a new adjuster works in every mode.
"""

from __future__ import annotations

from kitchen.context import Context
from kitchen.requests import score_targets, train_in_chunks
from kitchen.settings import ADAM_KEYS
from kitchen.stage import Stage
from kitchen.stages.training import adam_params, guard_nonfinite
from train_core.batching import split_evenly
from train_core.rl.advantages import compute_advantages
from train_core.rl.data_processing import assemble_training_data, remove_constant_reward_groups, remove_mask
from train_core.rl.kl_penalty import incorporate_kl_penalty
from train_core.rl.metrics import train_step_metrics

TRAIN_KEYS = (*ADAM_KEYS, "loss_fn", "loss_fn_config", "num_substeps")


class ComputeAdvantages(Stage):
    """Group-centred advantages over the groups kept for training (constant-reward groups are
    dropped when `remove_constant_reward_groups`)."""

    reads = ("sampled_groups",)
    writes = ("trained_groups", "trained_tags", "advantages")
    config_keys = ("remove_constant_reward_groups",)

    async def run(self, ctx: Context) -> None:
        sampled = ctx["sampled_groups"]
        groups_P = [g.trajectories for g in sampled]
        if ctx.config.remove_constant_reward_groups:
            groups_P = remove_constant_reward_groups(groups_P)
        kept = {id(group) for group in groups_P}
        ctx["trained_groups"] = groups_P
        ctx["trained_tags"] = [g.builder.logging_tags() for g in sampled if id(g.trajectories) in kept]
        ctx["advantages"] = compute_advantages(groups_P)


class AssembleData(Stage):
    """Datums for the policy-gradient loss: action tokens carry their sampling logprobs and the
    trajectory's advantage; the mask stays on for the KL terms and metrics. `rl_data_tags` holds
    each datum's group logging tags (its data set), for adjusters that differ by data set. With
    `parse_error_policy=mask`, turns whose reply failed to parse are not trained (advantage and
    mask 0; `num_masked_parse_error_turns` counts them)."""

    reads = ("trained_groups", "trained_tags", "advantages")
    writes = ("rl_data", "rl_data_tags")
    config_keys = ("parse_error_policy",)

    async def run(self, ctx: Context) -> None:
        groups_P = ctx["trained_groups"]
        mask = ctx.config.parse_error_policy == "mask"
        data_D, metadata_D = assemble_training_data(groups_P, ctx["advantages"], mask_parse_errors=mask)
        if mask:
            masked = sum(not t.parse_ok for g in groups_P for traj in g.trajectories_G for t in traj.transitions)
            ctx.record({"num_masked_parse_error_turns": float(masked)})
        ctx["rl_data"] = data_D
        ctx["rl_data_tags"] = [ctx["trained_tags"][meta["group_idx"]] for meta in metadata_D]
        ctx.record({"num_datums": len(data_D)})


class ApplyKLPenalty(Stage):
    """An advantage adjuster: pull the policy towards the model in state key `model` (by default
    the frozen reference): `kl_penalty_coef` times each action token's excess log-ratio over the
    batch mean is taken off its advantage (discounted by `kl_discount_factor`). Logs
    `kl_policy_base`, the mean sampled-vs-model log-ratio."""

    writes = ("rl_data",)
    calls = ("SamplingClient.compute_logprobs",)
    config_keys = ("kl_penalty_coef", "kl_discount_factor")

    def __init__(self, model: str = "reference_client", name: str | None = None) -> None:
        super().__init__(name)
        self.model = model
        self.reads = ("rl_data", model)

    async def run(self, ctx: Context) -> None:
        data_D = ctx["rl_data"]
        if not data_D:
            return
        base_logprobs_D = await score_targets(ctx[self.model], data_D)
        data_D, metrics = incorporate_kl_penalty(
            data_D, base_logprobs_D, ctx.config.kl_penalty_coef, ctx.config.kl_discount_factor
        )
        ctx["rl_data"] = data_D
        ctx.record(metrics)


class RLTrainStep(Stage):
    """Train on the step's datums with the configured `loss_fn` / `loss_fn_config`, in
    `num_substeps` pipelined optimizer steps; then compare the training logprobs with the
    sampling ones (`optim/kl_sample_train_v1|v2`, `optim/entropy`).

    A batch with no datums (no trajectory had a token to train) skips the update. The datums
    trained become `trained_data` (for `PostUpdateKL`). A step the optimizer did not apply because
    its loss or gradient was NaN/inf counts towards `max_bad_steps` (`guard_nonfinite`).
    """

    reads = ("rl_data", "training_client")
    writes = ("trained_data",)
    calls = ("TrainingClient.forward_backward", "TrainingClient.optim_step")
    config_keys = (*TRAIN_KEYS, "max_bad_steps")

    async def run(self, ctx: Context) -> None:
        config = ctx.config
        data_D = ctx["rl_data"]
        ctx["trained_data"] = data_D
        if not data_D:
            ctx.log.warning("train_step.skipped", step=ctx.step, reason="no datums: no trajectory had a token to train")
            return
        chunks = split_evenly([remove_mask(d, config.loss_fn) for d in data_D], config.num_substeps)
        results = await train_in_chunks(
            ctx["training_client"], chunks, config.loss_fn, config.loss_fn_config, adam_params(ctx)
        )
        ctx.record(train_step_metrics(data_D, [fb for fb, _ in results], [optim for _, optim in results]))
        guard_nonfinite(ctx, ctx.step, [optim for _, optim in results], [fb for fb, _ in results])
