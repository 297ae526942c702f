"""Per-step RL metrics: sampler/trainer agreement over action tokens, and rollout statistics."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from train_core.losses import loss_ratios, merge_loss_metrics
from train_core.rl.data_processing import shared_prompt_tokens
from train_core.rl.dynamic_sampling import has_reward_spread
from train_core.rl.rollouts import DroppedGroup, SampledGroup
from train_core.rl.types import EPISODE_STOPS, Metrics, TrajectoryGroup
from train_core.types import Datum, ForwardBackwardOutput, OptimStepOutput, TensorData

if TYPE_CHECKING:
    import torch


def action_token_logprobs(
    data_D: Sequence[Datum], logprobs_D: Sequence[torch.Tensor], what: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampling logprobs and `logprobs_D` (another policy's, per target token, described by
    `what` in errors) over every action token (mask > 0) of the batch, flattened, float64.
    `data_D` must still hold its mask; a datum whose logprobs do not line up is a ValueError."""
    import torch

    for i, (datum, other_T) in enumerate(zip(data_D, logprobs_D, strict=True)):
        shape = datum.loss_fn_inputs["logprobs"].shape
        if tuple(other_T.shape) != shape:
            raise ValueError(f"datum {i}: {tuple(other_T.shape)} {what} logprobs for {shape} sampling logprobs")
    if not data_D:
        empty = torch.empty(0, dtype=torch.float64)
        return empty, empty
    # one concatenation per input, then one mask: a batch of many short datums costs a few tensor
    # operations instead of several per datum
    sampling_N = TensorData.concat([datum.loss_fn_inputs["logprobs"] for datum in data_D], "float32")
    action_N = TensorData.concat([datum.loss_fn_inputs["mask"] for datum in data_D], "float32") > 0
    other_N = torch.cat([other_T.detach().reshape(-1) for other_T in logprobs_D])
    return sampling_N.double()[action_N], other_N.double()[action_N]


def compute_kl_sample_train(data_D: Sequence[Datum], training_logprobs_D: Sequence[torch.Tensor]) -> dict[str, float]:
    """How far the trainer's logprobs are from the sampler's, over action tokens (mask > 0).

    With `d = sampling - training`: v1 = mean(d) (unbiased KL estimate, can be negative),
    v2 = 0.5 * mean(d^2) (never negative); entropy = -mean(sampling logprob). On-policy with the
    same weights all of them but the entropy should be ~0. `data_D` must still hold its mask.
    """
    sampled_N, training_N = action_token_logprobs(data_D, training_logprobs_D, "training")
    if sampled_N.numel() == 0:
        raise ValueError("compute_kl_sample_train: the batch has no action tokens (mask > 0)")
    diffs_N = sampled_N - training_N
    return {
        "optim/kl_sample_train_v1": diffs_N.mean().item(),
        "optim/kl_sample_train_v2": 0.5 * (diffs_N**2).mean().item(),
        "optim/entropy": -sampled_N.mean().item(),
    }


def _mean_per_key(dicts: Sequence[Metrics]) -> Metrics:
    """Mean of each key over the dicts that have it."""
    values: dict[str, list[float]] = defaultdict(list)
    for d in dicts:
        for key, value in d.items():
            values[key].append(float(value))
    return {key: sum(vs) / len(vs) for key, vs in values.items()}


def _by_group_metrics(groups_P: Sequence[TrajectoryGroup], good_threshold: float) -> Metrics:
    """Fractions of groups with mixed rewards (useful signal), all good, or all bad."""
    n_mixed = n_good = n_bad = 0
    for group in groups_P:
        rewards_G = group.get_total_rewards()
        if has_reward_spread(rewards_G):
            n_mixed += 1
        elif rewards_G[0] >= good_threshold:
            n_good += 1
        else:
            n_bad += 1
    n = len(groups_P)
    return {
        "by_group/frac_mixed": n_mixed / n,
        "by_group/frac_all_good": n_good / n,
        "by_group/frac_all_bad": n_bad / n,
    }


def _rollout_metrics(groups_P: Sequence[TrajectoryGroup], good_threshold: float) -> Metrics:
    """Reward, length and per-transition/per-trajectory env metrics over a set of groups."""
    trajs = [traj for group in groups_P for traj in group.trajectories_G]
    transitions = [t for traj in trajs for t in traj.transitions]
    rewards = [r for group in groups_P for r in group.get_total_rewards()]
    n_turns = len(transitions)
    n_ac_tokens = sum(len(t.ac.tokens) for t in transitions)
    n_ob_tokens = sum(t.ob.length for t in transitions)
    metrics: Metrics = {
        "reward/total": sum(rewards) / len(rewards),
        "ac_tokens_per_turn": n_ac_tokens / max(n_turns, 1),
        "ob_tokens_per_turn": n_ob_tokens / max(n_turns, 1),
        "turns_per_episode": n_turns / len(trajs),
        "total_episodes": float(len(trajs)),
        "total_turns": float(n_turns),
        "total_ac_tokens": float(n_ac_tokens),
        "total_ob_tokens": float(n_ob_tokens),
    }
    n_failed = sum(group.num_failed for group in groups_P)
    n_episodes = len(trajs) + n_failed
    stops = [traj.stop_reason for traj in trajs] + ["error"] * n_failed
    metrics.update({f"stop/{reason}": stops.count(reason) / n_episodes for reason in EPISODE_STOPS})
    metrics["frac_parse_errors"] = sum(not t.parse_ok for t in transitions) / max(n_turns, 1)
    group_metrics = [m for group in groups_P for m in group.metrics_G]
    metrics.update(_mean_per_key([t.metrics for t in transitions] + group_metrics))
    metrics.update(_by_group_metrics(groups_P, good_threshold))
    return metrics


def compute_trajectory_metrics(
    groups_P: Sequence[TrajectoryGroup], tags_P: Sequence[Sequence[str]], good_threshold: float = 0.5
) -> Metrics:
    """Rollout metrics under `env/all/...`, and under `env/{tag}/...` for each logging tag.

    Per-tag metrics are reported even when one tag covers the whole batch (the Python original
    then leaves them out), so a tag's series has no gaps in steps where only its groups came.
    A group counts as all-good when its common reward is >= `good_threshold`.
    """
    if not groups_P or not all(group.trajectories_G for group in groups_P):
        raise ValueError("compute_trajectory_metrics needs groups, each with at least one trajectory")
    groups_by_tag: dict[str, list[TrajectoryGroup]] = defaultdict(list)
    for group, tags in zip(groups_P, tags_P, strict=True):
        for tag in tags:
            groups_by_tag[tag].append(group)
    out: Metrics = {}
    for tag, groups in groups_by_tag.items():
        out.update({f"env/{tag}/{k}": v for k, v in _rollout_metrics(groups, good_threshold).items()})
    out.update({f"env/all/{k}": v for k, v in _rollout_metrics(groups_P, good_threshold).items()})
    return out


_BATCH_LEVEL = ("env/all/by_group/", "env/all/ac_tokens_per_turn")


def token_metrics(groups_P: Sequence[TrajectoryGroup]) -> Metrics:
    """Token accounting of a step's rollouts: prompt (observation) tokens over all turns, sampled
    tokens, and the prompt tokens shared between turns of a multi-turn episode (the earlier
    context each extending observation repeats; `tokens/prompt - tokens/prompt_shared` is what a
    prefix-caching sampler has to prefill)."""
    trajs = [traj for group in groups_P for traj in group.trajectories_G]
    transitions = [t for traj in trajs for t in traj.transitions]
    return {
        "tokens/prompt": float(sum(t.ob.length for t in transitions)),
        "tokens/sampled": float(sum(len(t.ac.tokens) for t in transitions)),
        "tokens/prompt_shared": float(sum(shared_prompt_tokens(traj) for traj in trajs)),
    }


def trained_tokens(data_D: Sequence[Datum]) -> float:
    """Action tokens the update trains on (mask > 0): sampled tokens less masked turns."""
    if not data_D:
        return 0.0
    return float((TensorData.concat([d.loss_fn_inputs["mask"] for d in data_D], "float32") > 0).sum().item())


def rollout_failure_metrics(groups: Sequence[SampledGroup], dropped: Sequence[DroppedGroup]) -> Metrics:
    """Groups rolled out again (`retry`), groups dropped and episodes left out (`min_viable_group`)."""
    return {
        "rollout/groups_retried": float(sum(g.retries > 0 for g in groups)),
        "rollout/retries": float(sum(g.retries for g in groups)),
        "rollout/groups_dropped": float(len(dropped)),
        "rollout/episodes_failed": float(sum(g.trajectories.num_failed for g in groups)),
    }


def compute_kl_pre_post(data_D: Sequence[Datum], new_logprobs_D: Sequence[torch.Tensor]) -> Metrics:
    """How far the update moved the policy on the step's own action tokens (mask > 0): with
    `d = sampling logprob - new logprob`, `optim/kl_pre_post` = mean(d) (an estimate of
    KL(sampler || updated policy) on the sampled tokens) and `optim/kl_pre_post_v2` = 0.5 mean(d^2).
    Empty when no datum has an action token."""
    sampled_N, new_N = action_token_logprobs(data_D, new_logprobs_D, "new")
    if sampled_N.numel() == 0:
        return {}
    diffs_N = sampled_N - new_N
    return {"optim/kl_pre_post": diffs_N.mean().item(), "optim/kl_pre_post_v2": 0.5 * (diffs_N**2).mean().item()}


def rollout_metrics(groups: Sequence[SampledGroup], prefix: str = "env") -> Metrics:
    """Reward, length and env metrics under `{prefix}/all/...` and `{prefix}/{tag}/...`.

    Two families describe the batch rather than an env and drop the `env/all/` prefix:
    `by_group/frac_mixed|frac_all_good|frac_all_bad` and `ac_tokens_per_turn`.
    """
    raw = compute_trajectory_metrics([g.trajectories for g in groups], [g.builder.logging_tags() for g in groups])
    out: Metrics = token_metrics([g.trajectories for g in groups]) if prefix == "env" else {}
    for key, value in raw.items():
        if prefix == "env" and key.startswith(_BATCH_LEVEL):
            out[key.removeprefix("env/all/")] = value
        else:
            out[prefix + key.removeprefix("env")] = value
    return out


def training_logprobs(outputs: Sequence[ForwardBackwardOutput]) -> list[torch.Tensor]:
    """Per-datum training logprobs, in submission order."""
    return [out["logprobs"].to_torch() for fb in outputs for out in fb.loss_fn_outputs]


def train_step_metrics(
    data_D: Sequence[Datum], fb_outputs: Sequence[ForwardBackwardOutput], optim_outputs: Sequence[OptimStepOutput]
) -> Metrics:
    """A step's `forward_backward_metrics` and `optim_step_metrics` together."""
    return {**forward_backward_metrics(data_D, fb_outputs), **optim_step_metrics(optim_outputs)}


def forward_backward_metrics(data_D: Sequence[Datum], fb_outputs: Sequence[ForwardBackwardOutput]) -> Metrics:
    """Sampler/trainer agreement and entropy over action tokens (`data_D` still holds its masks;
    left out when every action token is masked), the summed loss, the trained token count
    (`tokens/trained`) and what the loss reported over the whole step (`loss_ratios`: clip
    fractions of a clipping loss, KL and entropy means)."""
    n_trained = trained_tokens(data_D)
    metrics = compute_kl_sample_train(data_D, training_logprobs(fb_outputs)) if n_trained else {}
    metrics["tokens/trained"] = n_trained
    loss_metrics = merge_loss_metrics([fb.metrics for fb in fb_outputs])
    metrics["optim/loss:sum"] = loss_metrics.get("loss:sum", 0.0)
    metrics.update(loss_ratios(loss_metrics))
    return metrics


def optim_step_metrics(optim_outputs: Sequence[OptimStepOutput]) -> Metrics:
    """The optimizer's metrics averaged over a step's substeps, and their count."""
    metrics: Metrics = {}
    keys = {key for out in optim_outputs for key in out.metrics}
    for key in sorted(keys):
        values = [out.metrics[key] for out in optim_outputs if key in out.metrics]
        metrics[f"optim/{key}"] = sum(values) / len(values)
    metrics["optim/substeps"] = float(len(optim_outputs))
    return metrics
