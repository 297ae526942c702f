"""DAPO's two ways of handling replies cut off at the token budget, whose reward says more about
the length than about the answer:

- overlong reward shaping (soft punishment): with budget `L_max` (a turn's `max_tokens`) and a
  buffer `L_c`, a reply of `n` tokens is penalised 0 when `n <= L_max - L_c`, linearly down to
  `-penalty_factor` as `n` reaches `L_max`, and `-penalty_factor` beyond (DAPO's
  `((L_max - L_c) - n) / L_c`); the penalty is added to the trajectory's reward before
  advantages are computed;
- overlong filtering: truncated replies are left out of the loss (their datums' mask and
  advantages become 0) but still count in their group's baseline.

DAPO's own setting is `L_max = 20480`, `L_c = 4096`; `default_buffer_tokens` keeps that ratio
for other budgets. A multi-turn episode pays for each turn against that turn's budget.
"""

from __future__ import annotations

from collections.abc import Sequence

from train_core.errors import InvalidInputError
from train_core.rl.data_processing import DatumMetadata
from train_core.rl.types import Metrics, Trajectory, TrajectoryGroup
from train_core.types import Datum, TensorData

DAPO_BUFFER_FRACTION = 4096 / 20480


def default_buffer_tokens(max_tokens: int) -> int:
    """DAPO's buffer scaled to `max_tokens` (a fifth of it, at least one token)."""
    return max(1, round(max_tokens * DAPO_BUFFER_FRACTION))


def overlong_penalty(num_tokens: int, max_tokens: int, buffer_tokens: int, penalty_factor: float = 1.0) -> float:
    """The soft punishment of a reply of `num_tokens` (0 or negative, never below -penalty_factor)."""
    if not 0 < buffer_tokens <= max_tokens:
        raise InvalidInputError(f"overlong buffer must be in [1, max_tokens={max_tokens}], got {buffer_tokens}")
    start = max_tokens - buffer_tokens
    if num_tokens <= start:
        return 0.0
    return -penalty_factor * min((num_tokens - start) / buffer_tokens, 1.0)


def trajectory_overlong_penalty(traj: Trajectory, max_tokens: int, buffer_tokens: int, penalty_factor: float) -> float:
    """The sum of the episode's per-turn penalties."""
    return sum(overlong_penalty(len(t.ac.tokens), max_tokens, buffer_tokens, penalty_factor) for t in traj.transitions)


def shape_overlong_rewards(
    groups_P: Sequence[TrajectoryGroup], max_tokens: int, buffer_tokens: int, penalty_factor: float = 1.0
) -> tuple[list[TrajectoryGroup], Metrics]:
    """The groups with each trajectory's penalty added to its final reward, and
    `overlong/penalized_fraction` (trajectories with a penalty) and `overlong/mean_penalty`."""
    shaped_P: list[TrajectoryGroup] = []
    penalties: list[float] = []
    for group in groups_P:
        penalties_G = [
            trajectory_overlong_penalty(traj, max_tokens, buffer_tokens, penalty_factor)
            for traj in group.trajectories_G
        ]
        penalties += penalties_G
        finals_G = [final + penalty for final, penalty in zip(group.final_rewards_G, penalties_G, strict=True)]
        shaped_P.append(TrajectoryGroup(group.trajectories_G, finals_G, group.metrics_G, group.num_failed))
    n = max(len(penalties), 1)
    metrics = {
        "overlong/penalized_fraction": sum(p < 0 for p in penalties) / n,
        "overlong/mean_penalty": sum(penalties) / n,
    }
    return shaped_P, metrics


def is_truncated(traj: Trajectory) -> bool:
    """A turn of the episode stopped at its token budget rather than on a stop sequence."""
    return any(t.ac.stop_reason == "length" for t in traj.transitions)


def filter_overlong(
    data_D: Sequence[Datum], metadata_D: Sequence[DatumMetadata], groups_P: Sequence[TrajectoryGroup]
) -> tuple[list[Datum], Metrics]:
    """The datums with those of truncated trajectories masked out (mask and advantages 0), and
    `overlong/filtered_fraction`: the share of datums masked. `metadata_D` is
    `assemble_training_data`'s, naming each datum's group and trajectory in `groups_P`."""
    filtered_D: list[Datum] = []
    n_filtered = 0
    for datum, meta in zip(data_D, metadata_D, strict=True):
        if is_truncated(groups_P[meta["group_idx"]].trajectories_G[meta["traj_idx"]]):
            n_filtered += 1
            zeros = TensorData.from_list([0.0] * datum.loss_fn_inputs["mask"].shape[0], "float32")
            datum = Datum(datum.model_input, {**datum.loss_fn_inputs, "mask": zeros, "advantages": zeros})
        filtered_D.append(datum)
    return filtered_D, {"overlong/filtered_fraction": n_filtered / max(len(data_D), 1)}
