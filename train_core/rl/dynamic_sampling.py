"""DAPO's dynamic sampling, the data side: keep only groups whose rewards differ (a constant group
has zero advantages and teaches nothing) and sample more rounds until the batch is full.

`BatchFill` is the bookkeeping of one step's filling: each generation round's groups go in, the
informative ones are kept, and it says when the batch is full or the round budget is spent (then
the step trains on what it has; the rounds used are reported). The sampling loop itself belongs
to the workflow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from train_core.errors import InvalidInputError
from train_core.rl.types import Metrics, TrajectoryGroup, has_reward_spread

G = TypeVar("G")


def total_rewards(group: TrajectoryGroup) -> Sequence[float]:
    return group.get_total_rewards()


@dataclass(frozen=True)
class BatchFill(Generic[G]):
    """The informative groups gathered so far for one batch of `target` groups, over at most
    `max_rounds` generation rounds. Immutable: `add_round` returns the next state."""

    target: int
    max_rounds: int
    rewards_of: Callable[[G], Sequence[float]]
    kept: tuple[G, ...] = ()
    rounds: int = 0
    dropped: int = 0
    sampled: int = 0

    def __post_init__(self) -> None:
        if self.target < 1 or self.max_rounds < 1:
            raise InvalidInputError(
                f"dynamic sampling needs target >= 1 and max_rounds >= 1, got {self.target} and {self.max_rounds}"
            )

    def add_round(self, groups: Sequence[G]) -> BatchFill[G]:
        """The state after one more generation round produced `groups`."""
        if self.done:
            raise InvalidInputError("dynamic sampling: the batch is already full or out of rounds")
        informative = tuple(g for g in groups if has_reward_spread(self.rewards_of(g)))
        return BatchFill(
            self.target,
            self.max_rounds,
            self.rewards_of,
            self.kept + informative,
            self.rounds + 1,
            self.dropped + len(groups) - len(informative),
            self.sampled + len(groups),
        )

    @property
    def full(self) -> bool:
        return len(self.kept) >= self.target

    @property
    def done(self) -> bool:
        """Full, or no rounds left: stop sampling."""
        return self.full or self.rounds >= self.max_rounds

    def missing(self) -> int:
        """Informative groups still wanted."""
        return max(self.target - len(self.kept), 0)

    def batch(self) -> list[G]:
        """The groups to train on: the first `target` kept (surplus from the last round is left
        out, as verl does), or all kept if the rounds ran out first."""
        return list(self.kept[: self.target])

    def metrics(self) -> Metrics:
        """`dynamic_sampling/rounds` used, groups `sampled` and `dropped` (constant rewards), and
        `fill`: the share of the target batch that was filled."""
        return {
            "dynamic_sampling/rounds": float(self.rounds),
            "dynamic_sampling/groups_sampled": float(self.sampled),
            "dynamic_sampling/groups_dropped": float(self.dropped),
            "dynamic_sampling/fill": min(len(self.kept), self.target) / self.target,
        }


def trajectory_batch_fill(target: int, max_rounds: int) -> BatchFill[TrajectoryGroup]:
    """A `BatchFill` over `TrajectoryGroup`s, judged by their total rewards."""
    return BatchFill(target, max_rounds, total_rewards)
