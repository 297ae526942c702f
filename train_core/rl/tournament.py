"""Rewards from a pairwise tournament within a group of samples (RLHF from pairwise preferences).

A judge compares samples i (shown as A) and j (shown as B) and answers s in [-1, 1]: +1 prefers B,
-1 prefers A, 0 is a tie. Sample j scores `(1 + s) / 2` from the comparison and i scores
`(1 - s) / 2`, so every comparison hands out exactly one point. A sample's reward is its mean
score over the comparisons it took part in, in [0, 1]; without ties the group's rewards average
0.5. With the `both_ways` scheme every pair is judged in both orders, which cancels a judge's
constant position bias: a judge that adds b to every score moves i's and j's scores by -b/2 and
+b/2 in one order and the opposite in the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from train_core.rl.preference_pairs import all_pairs_both_ways, all_pairs_one_way

PairScheme = Literal["one_way", "both_ways"]


def tournament_pairs(n: int, scheme: PairScheme) -> list[tuple[int, int]]:
    """The (A, B) index pairs a group of n samples is judged on."""
    return all_pairs_both_ways(n) if scheme == "both_ways" else all_pairs_one_way(n)


@dataclass(frozen=True)
class TournamentResult:
    rewards_G: list[float]
    """Each sample's mean win score, in [0, 1]."""
    win_rate_in_group: float
    """The mean of the rewards (0.5 without ties)."""
    tie_fraction: float
    """Share of comparisons scored exactly 0."""
    position_bias: float | None
    """(both ways only) the judge's mean lean towards B: mean over pairs of (s(i,j) + s(j,i)) / 2,
    0 for an unbiased judge, +1 for one that always prefers B."""


def tournament_rewards(n: int, pairs: Sequence[tuple[int, int]], scores: Sequence[float]) -> TournamentResult:
    """Rewards of n samples from judge `scores` of `pairs` (A index, B index)."""
    if len(pairs) != len(scores):
        raise ValueError(f"{len(pairs)} pairs but {len(scores)} scores")
    points = [0.0] * n
    games = [0] * n
    for (a, b), score in zip(pairs, scores, strict=True):
        if not -1.0 <= score <= 1.0:
            raise ValueError(f"judge score {score} is outside [-1, 1]")
        if a == b or not (0 <= a < n and 0 <= b < n):
            raise ValueError(f"pair {(a, b)} is not two distinct samples of {n}")
        points[b] += (1.0 + score) / 2.0
        points[a] += (1.0 - score) / 2.0
        games[a] += 1
        games[b] += 1
    rewards = [p / g if g else 0.5 for p, g in zip(points, games, strict=True)]
    ties = sum(1 for score in scores if score == 0.0)
    by_pair = dict(zip(pairs, scores, strict=True))
    swapped = [(s + by_pair[(b, a)]) / 2.0 for (a, b), s in by_pair.items() if a < b and (b, a) in by_pair]
    return TournamentResult(
        rewards_G=rewards,
        win_rate_in_group=sum(rewards) / n if n else 0.0,
        tie_fraction=ties / len(scores) if scores else 0.0,
        position_bias=sum(swapped) / len(swapped) if swapped else None,
    )
