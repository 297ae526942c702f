"""One RL step, top to bottom: the step's env groups, rollouts with the current sampler, what
they are logged as, advantages (the configured estimator, DAPO's overlong shaping), datum
assembly (overlong filtering), the optional KL penalty or reference logprobs for a KL term in the
loss, the policy-gradient update (its route and correction: `train_core.rl.policy_objective`'s
`PolicyUpdate`; the backend calls here), and the refreshed sampler. The math is `train_core.rl`'s:
rollouts and their metrics in `rollouts`, rewards to datums in `data_processing`, the update in
`policy_objective`.

Every mode runs these stages: sync runs them in this order on the whole batch; stream-minibatch
(`kitchen.families.rl.stream`) runs advantages, assembly and the penalty once per minibatch; async
(`kitchen.families.rl.async_mode`) replaces the rollouts with groups taken from its sampling workers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kitchen.engine.config.run import RunConfig
from kitchen.engine.context import Context
from kitchen.engine.ports import SamplingClient, Tokenizer, TrainingClient
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import ConfigPredicate
from kitchen.families.common.requests import score_targets
from kitchen.families.common.settings import OptimizerSettings, SamplingSettings
from kitchen.families.common.training import adam_params, guard_nonfinite, pipelined_steps
from kitchen.families.rl.algorithm_settings import AlgorithmSettings
from kitchen.families.rl.settings import EpisodeSettings, RLLoopSettings
from train_core.renderers.base import Renderer
from train_core.rl.data_processing import assemble_training_data, compute_advantages, remove_constant_reward_groups
from train_core.rl.kl_penalty import incorporate_kl_penalty
from train_core.rl.overlong import filter_overlong, shape_overlong_rewards
from train_core.rl.policy_objective import (
    PROXIMAL_LOSS,
    REFERENCE_LOGPROBS,
    PolicyUpdate,
    compute_kl_pre_post,
    forward_backward_metrics,
    optim_step_metrics,
    training_logprobs,
)
from train_core.rl.rollouts import (
    DroppedGroup,
    RolloutFailure,
    RolloutLimits,
    RolloutOptions,
    SampledGroup,
    kept_groups,
    rollout_failure_metrics,
    rollout_metrics,
    sample_group,
)
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder, TrajectoryGroup
from train_core.types import Datum, ForwardBackwardOutput, SamplingParams, TensorData

if TYPE_CHECKING:
    import torch


def rollout_params(sampling: SamplingSettings) -> SamplingParams:
    """The `sampling` section as sampling params; each env's stop condition is added per call."""
    return SamplingParams(max_tokens=sampling.max_tokens, temperature=sampling.temperature)


def rollout_options(episode: EpisodeSettings) -> RolloutOptions:
    """Episode limits, termination reward and failure policy from the `episode` section."""
    failure = episode.failure
    return RolloutOptions(
        limits=RolloutLimits(
            max_turns=episode.max_turns,
            max_tokens=episode.max_tokens,
            timeout_s=episode.timeout_s,
            max_context_tokens=episode.max_context_tokens,
        ),
        termination_reward=episode.termination_reward,
        failure=RolloutFailure(failure.policy, failure.retries, failure.min_group_size),
    )


def note_dropped(ctx: Context, dropped: list[DroppedGroup]) -> None:
    for group in dropped:
        ctx.log.warning("rollout.group_dropped", step=ctx.step, tags=group.builder.logging_tags(), error=group.error)


# -- 1. the step's problems --------------------------------------------------------------------


@dataclass(frozen=True)
class EnvGroups:
    env_group_builders: list[EnvGroupBuilder]


class GetEnvGroups(Stage):
    """The env-group builders of the current step: batch `step` of the dataset (cycled), so a
    resumed run sees exactly the problems an uninterrupted run would."""

    async def run(self, ctx: Context, rl_task: RLTask) -> EnvGroups:
        dataset = rl_task.train
        return EnvGroups(list(dataset.get_batch(ctx.step % len(dataset))))


# -- 2. rollouts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rollouts:
    sampled_groups: list[SampledGroup]


class DoRollouts(Stage):
    """Roll out every env group of the step with the current sampler, all groups concurrently.

    Seeds derive from (seed, step, group index), so a resumed run samples what an uninterrupted
    one would have.
    """

    calls = (SamplingClient.sample,)

    async def run(
        self,
        ctx: Context,
        env_group_builders: list[EnvGroupBuilder],
        sampling_client: SamplingClient,
        sampler_step: int,
        sampling: SamplingSettings,
        episode: EpisodeSettings,
        run: RunConfig,
    ) -> Rollouts:
        params, options = rollout_params(sampling), rollout_options(episode)
        results = await asyncio.gather(
            *(
                sample_group(builder, sampling_client, sampler_step, params, ("train", run.seed, ctx.step, i), options)
                for i, builder in enumerate(env_group_builders)
            )
        )
        groups, dropped = kept_groups(results)
        note_dropped(ctx, dropped)
        ctx.record(rollout_failure_metrics(groups, dropped))
        return Rollouts(groups)


class RecordRolloutMetrics(Stage):
    """Reward, length and env metrics of every group sampled for the step (`env/all/...`,
    `env/{tag}/...`), whether or not it is kept for training."""

    async def run(self, ctx: Context, sampled_groups: list[SampledGroup]) -> None:
        if not sampled_groups:
            ctx.log.warning("rollout_metrics.skipped", step=ctx.step, reason="no group was kept")
            return
        ctx.record(rollout_metrics(sampled_groups))


def group_transcripts(
    group: SampledGroup, tokenizer: Tokenizer, step: int, group_index: int, renderer: Renderer | None = None
) -> list[dict[str, object]]:
    """One JSON-ready record per trajectory: each turn's observation and action as text. With a
    renderer, a turn also holds the tool calls its action parsed to, and a turn whose observation
    extends the last observation and action holds what the env added (`env_text`: tool results,
    an error message), so a report shows them apart from the model's text."""
    records: list[dict[str, object]] = []
    rewards_G = group.trajectories.get_total_rewards()
    for traj_index, traj in enumerate(group.trajectories.trajectories_G):
        turns: list[dict[str, object]] = []
        context: list[int] = []
        for t in traj.transitions:
            ob = t.ob.to_ints()
            turn: dict[str, object] = {
                "observation": tokenizer.decode(ob),
                "action": tokenizer.decode(t.ac.tokens),
                "stop_reason": t.ac.stop_reason,
                "parse_ok": t.parse_ok,
                "reward": t.reward,
                "metrics": t.metrics,
            }
            if t.ac.maybe_versions is not None:  # async mode: the policy versions its tokens came from
                turn["policy_versions"] = sorted(set(t.ac.maybe_versions))
            if renderer is not None:
                if context and ob[: len(context)] == context:
                    turn["env_text"] = tokenizer.decode(ob[len(context) :])
                calls = renderer.parse_response(t.ac.tokens)[0].get("tool_calls")
                if calls:
                    turn["tool_calls"] = [{"name": c["name"], "arguments": c["arguments"]} for c in calls]
            context = [*ob, *t.ac.tokens]
            turns.append(turn)
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
    """The first `rl.transcript_groups` groups of the step as text, to `rollouts/step_{step:06d}.jsonl`."""

    async def run(
        self,
        ctx: Context,
        sampled_groups: list[SampledGroup],
        tokenizer: Tokenizer,
        rl: RLLoopSettings,
        renderer: Renderer | None = None,
    ) -> None:
        count = rl.transcript_groups
        if ctx.run_dir is None or count == 0:
            return
        folder = ctx.run_dir / "rollouts"
        folder.mkdir(exist_ok=True)
        lines = [
            json.dumps(record)
            for index, group in enumerate(sampled_groups[:count])
            for record in group_transcripts(group, tokenizer, ctx.step, index, renderer)
        ]
        (folder / f"step_{ctx.step:06d}.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")


# -- 3. advantages -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Advantages:
    trained_groups: list[TrajectoryGroup]
    trained_tags: list[list[str]]
    advantages: list[torch.Tensor]


class ComputeAdvantages(Stage):
    """Advantages over the groups kept for training by `advantage_estimator` (with `scale_rewards`
    for grpo): constant-reward groups are dropped first when `remove_constant_reward_groups`, and
    with `overlong_buffer` each trajectory's reward takes DAPO's soft overlong penalty before the
    estimator sees it (`overlong/*` metrics; the rollout metrics keep the env's own reward).
    Batch-level estimators see the groups given (in stream mode, the minibatch's)."""

    async def run(
        self,
        ctx: Context,
        sampled_groups: list[SampledGroup],
        algorithm: AlgorithmSettings,
        sampling: SamplingSettings,
    ) -> Advantages:
        groups_P = [g.trajectories for g in sampled_groups]
        if algorithm.remove_constant_reward_groups:
            groups_P = remove_constant_reward_groups(groups_P)
        kept = {id(group) for group in groups_P}
        tags_P = [g.builder.logging_tags() for g in sampled_groups if id(g.trajectories) in kept]
        if algorithm.overlong_buffer is not None:
            max_tokens = sampling.max_tokens
            buffer, factor = algorithm.overlong_buffer_tokens(max_tokens), algorithm.overlong_buffer.penalty_factor
            groups_P, metrics = shape_overlong_rewards(groups_P, max_tokens, buffer, factor)
            ctx.record(metrics)
        options = {"scale_rewards": algorithm.scale_rewards} if algorithm.scale_rewards is not None else {}
        advantages_P = compute_advantages(groups_P, algorithm.advantage_estimator, options) if groups_P else []
        return Advantages(groups_P, tags_P, advantages_P)


# -- 4. datum assembly -------------------------------------------------------------------------


@dataclass(frozen=True)
class RLData:
    rl_data: list[Datum]


@dataclass(frozen=True)
class AssembledData:
    rl_data: list[Datum]
    rl_data_tags: list[list[str]]
    """Each datum's group logging tags (its data set), for adjusters that differ by data set."""


class AssembleData(Stage):
    """Datums for the policy-gradient loss: action tokens carry their sampling logprobs and the
    trajectory's advantage; the mask stays on for the KL terms, the aggregation and metrics. With
    `parse_error_policy=mask`, turns whose reply failed to parse are not trained (advantage and
    mask 0; `num_masked_parse_error_turns` counts them); with `overlong_filter`, neither are
    trajectories cut at `max_tokens` (`overlong/filtered_fraction`), which still count in their
    group's baseline."""

    async def run(
        self,
        ctx: Context,
        trained_groups: list[TrajectoryGroup],
        trained_tags: list[list[str]],
        advantages: list[torch.Tensor],
        algorithm: AlgorithmSettings,
        episode: EpisodeSettings,
    ) -> AssembledData:
        mask = episode.parse_error_policy == "mask"
        data_D, metadata_D = assemble_training_data(trained_groups, advantages, mask_parse_errors=mask)
        if algorithm.overlong_filter:
            data_D, metrics = filter_overlong(data_D, metadata_D, trained_groups)
            ctx.record(metrics)
        if mask:
            masked = sum(not t.parse_ok for g in trained_groups for traj in g.trajectories_G for t in traj.transitions)
            ctx.record({"num_masked_parse_error_turns": float(masked)})
        ctx.record({"num_datums": len(data_D)})
        return AssembledData(data_D, [trained_tags[meta["group_idx"]] for meta in metadata_D])


# -- 5. advantage adjusters (a workflow's `adjust` slot) ---------------------------------------


class ApplyKLPenalty(Stage):
    """Pull the policy towards the frozen reference (`keys={"reference_client": ...}` for another
    model): `kl_penalty_coef` times each action token's excess log-ratio over the batch mean is
    taken off its advantage (discounted by `kl_discount_factor`). Logs `kl_policy_base`, the mean
    sampled-vs-model log-ratio."""

    calls = (SamplingClient.compute_logprobs,)

    async def run(
        self, ctx: Context, rl_data: list[Datum], reference_client: SamplingClient, algorithm: AlgorithmSettings
    ) -> RLData:
        if not rl_data:
            return RLData(rl_data)
        base_logprobs_D = await score_targets(reference_client, rl_data)
        data_D, metrics = incorporate_kl_penalty(
            rl_data, base_logprobs_D, algorithm.kl_penalty_coef, algorithm.kl_discount_factor
        )
        ctx.record(metrics)
        return RLData(data_D)


class AddReferenceLogprobs(Stage):
    """For a KL term in the loss (`kl_loss_coef`): each datum's target tokens scored by the frozen
    reference, as its `reference_logprobs` (the objective's KL estimator compares them with the
    policy's logprobs inside the loss)."""

    calls = (SamplingClient.compute_logprobs,)

    async def run(self, rl_data: list[Datum], reference_client: SamplingClient) -> RLData:
        reference_D = await score_targets(reference_client, rl_data)
        return RLData([with_reference(datum, ref_T) for datum, ref_T in zip(rl_data, reference_D, strict=True)])


def with_reference(datum: Datum, reference_T: torch.Tensor) -> Datum:
    inputs = {**datum.loss_fn_inputs, REFERENCE_LOGPROBS: TensorData.from_torch(reference_T.float())}
    return Datum(datum.model_input, inputs)


# -- 6. the update -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainedData:
    trained_data: list[Datum]


def policy_update(algorithm: AlgorithmSettings, max_tokens: int, backend: str, minibatches: int = 1) -> PolicyUpdate:
    """The update the `algorithm` section asks for, routed for `backend`."""
    custom = bool(algorithm.custom_route_reasons(backend, max_tokens))
    return PolicyUpdate(algorithm.policy_objective(max_tokens, minibatches), custom, algorithm.correction())


@dataclass(frozen=True)
class PlannedUpdate:
    policy_update: PolicyUpdate


class PlanUpdate(Stage):
    """The policy update the `algorithm` section asks for, routed for the run's backend, built (and
    so checked) once before RL starts; stream mode aggregates each of its minibatches alone."""

    async def run(
        self, algorithm: AlgorithmSettings, sampling: SamplingSettings, rl: RLLoopSettings, run: RunConfig
    ) -> PlannedUpdate:
        minibatches = rl.stream_minibatch.num_minibatches if rl.stream_minibatch is not None else 1
        return PlannedUpdate(policy_update(algorithm, sampling.max_tokens, run.backend, minibatches))


async def prepare_update(
    update: PolicyUpdate, client: TrainingClient, data_D: Sequence[Datum]
) -> tuple[list[Datum], dict[str, float]]:
    """When the update needs them, the proximal logprobs from one `forward` on the current weights,
    folded in (`PolicyUpdate.with_proximal`); else the datums unchanged (their mismatch is measured
    from the update's own logprobs)."""
    if not update.needs_proximal or not data_D:
        return list(data_D), {}
    proximal = await client.forward(update.proximal_request(data_D), PROXIMAL_LOSS)
    return update.with_proximal(data_D, training_logprobs([await proximal]))


async def submit_update(
    update: PolicyUpdate, client: TrainingClient, data_D: Sequence[Datum]
) -> Awaitable[ForwardBackwardOutput]:
    """One forward_backward of the objective over `data_D` (one optimizer step's worth, or a
    stream minibatch) by its route; the datums still hold their masks."""
    objective = update.objective
    if update.custom:
        return await client.forward_backward_custom(data_D, objective.custom_loss_fn())
    loss_config = dict(objective.loss_fn_config) if objective.loss_fn_config else None
    return await client.forward_backward(objective.builtin_data(data_D), objective.loss_fn, loss_config)


class RLTrainStep(Stage):
    """Train on the step's datums: the RL settings' objective (`loss_fn` with its clip keys,
    `loss_aggregation`, a KL term and entropy bonus) in `num_substeps` pipelined optimizer steps,
    each chunk aggregated alone, through the route the backend runs (`PlanUpdate`); with a
    `rollout_correction`, one `forward` first for the proximal logprobs. Then compare the
    training logprobs with the sampling ones (`optim/kl_sample_train_v1|v2`, `optim/entropy`,
    `mismatch/*`, `optim/token_entropy`).

    A batch with no datums (no trajectory had a token to train) skips the update. The datums
    trained become `trained_data` (for `PostUpdateKL`). A step the optimizer did not apply because
    its loss or gradient was NaN/inf counts towards `max_bad_steps` (`guard_nonfinite`).
    """

    calls = (
        TrainingClient.forward,
        TrainingClient.forward_backward,
        TrainingClient.forward_backward_custom,
        TrainingClient.optim_step,
    )

    async def run(
        self,
        ctx: Context,
        rl_data: list[Datum],
        training_client: TrainingClient,
        policy_update: PolicyUpdate,
        rl: RLLoopSettings,
        optimizer: OptimizerSettings,
        run: RunConfig,
    ) -> TrainedData:
        if not rl_data:
            ctx.log.warning("train_step.skipped", step=ctx.step, reason="no datums: no trajectory had a token to train")
            return TrainedData(rl_data)
        update = policy_update
        data_D, metrics = await prepare_update(update, training_client, rl_data)
        ctx.record(metrics)
        chunks = update.substeps(data_D, rl.num_substeps)

        async def forward_backward(chunk: Sequence[Datum]) -> Awaitable[ForwardBackwardOutput]:
            return await submit_update(update, training_client, chunk)

        def measure(fb_outputs: list[ForwardBackwardOutput]) -> None:
            """While the last optimizer step runs."""
            ctx.record(forward_backward_metrics(data_D, fb_outputs))
            ctx.record(update.metrics(data_D, fb_outputs))

        adam = adam_params(ctx, optimizer)
        results = await pipelined_steps(training_client, chunks, forward_backward, adam, on_forward_backward=measure)
        fb_outputs, optim_outputs = [fb for fb, _ in results], [optim for _, optim in results]
        ctx.record(optim_step_metrics(optim_outputs))
        guard_nonfinite(ctx, ctx.step, run.max_bad_steps, optim_outputs, fb_outputs)
        return TrainedData(data_D)


# -- 7. the next step's sampler ----------------------------------------------------------------


@dataclass(frozen=True)
class Sampler:
    sampling_client: SamplingClient
    sampler_step: int
    """Optimizer steps its weights have taken (the age off-policy filtering uses)."""


def weight_sync_metrics(client: object) -> dict[str, float]:
    """`time/weight_sync`: the seconds a backend with a separate rollout engine (the local
    backend's vLLM) spent moving new weights into it, where the sampling client says."""
    seconds = getattr(client, "weight_sync_s", None)
    return {} if seconds is None else {"time/weight_sync": float(seconds)}


class RefreshSampler(Stage):
    """A sampling client on the training client's current weights. Inside the step loop it runs
    after the step's update, so its `sampler_step` is `step + 1`."""

    calls = (TrainingClient.save_weights_and_get_sampling_client,)

    def __init__(self, after_update: bool = True, name: str | None = None) -> None:
        super().__init__(name or ("refresh_sampler" if after_update else "initial_sampler"))
        self.after_update = after_update

    async def run(self, ctx: Context, training_client: TrainingClient) -> Sampler:
        client = await training_client.save_weights_and_get_sampling_client()
        ctx.record(weight_sync_metrics(client))
        return Sampler(client, ctx.step + 1 if self.after_update else ctx.step)


class PostUpdateKL(Stage):
    """How far the step's update moved the policy on the step's own tokens: the trained datums
    scored by the refreshed sampler (one `compute_logprobs` per datum, all at once), compared with
    their sampling logprobs (`optim/kl_pre_post`, `optim/kl_pre_post_v2`). Runs after
    `RefreshSampler` when `post_update_kl` is on."""

    calls = (SamplingClient.compute_logprobs,)

    async def run(self, ctx: Context, trained_data: list[Datum], sampling_client: SamplingClient) -> None:
        if trained_data:
            ctx.record(compute_kl_pre_post(trained_data, await score_targets(sampling_client, trained_data)))


post_update_kl_on = ConfigPredicate("rl.post_update_kl is on", RLLoopSettings, lambda ctx, rl: rl.post_update_kl)
