"""Sampler/trainer agreement turn by turn: a long episode's numerics check.

A multi-turn episode whose observations extend each other trains as one datum; its action tokens
come in runs, one per turn (mask > 0). Comparing the sampler's logprob of every action token
with the trainer's, run by run, shows whether agreement degrades with context depth (a
position-encoding or attention bug past some length shows up as the late turns drifting while
the early ones agree).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from train_core.rl.data_processing import action_token_logprobs
from train_core.types import Datum

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class TurnAgreement:
    """Turn `turn` (0-based) over every datum that has it: with `d = sampling - training` per action
    token, `kl_v1` = mean(d), `kl_v2` = 0.5 mean(d^2), `max_abs_diff` = max |d|; `depth` is the mean
    position of the turn's first action token (how much context it was sampled after)."""

    turn: int
    tokens: int
    depth: float
    kl_v1: float
    kl_v2: float
    max_abs_diff: float


def action_runs(mask_T: torch.Tensor) -> list[tuple[int, int]]:
    """`[start, end)` of each maximal run of action tokens (mask > 0), in order."""
    import torch

    on_T = (mask_T > 0).to(torch.int8)
    edges_T = torch.diff(on_T, prepend=on_T.new_zeros(1), append=on_T.new_zeros(1))
    starts = torch.nonzero(edges_T == 1).flatten().tolist()
    ends = torch.nonzero(edges_T == -1).flatten().tolist()
    return list(zip(starts, ends, strict=True))


def turn_agreement(data_D: Sequence[Datum], training_logprobs_D: Sequence[torch.Tensor]) -> list[TurnAgreement]:
    """Per-turn agreement of the sampler's logprobs (`logprobs`) with `training_logprobs_D` (the
    trainer's, per target token) over the datums' action runs; turn k is the k-th run of each datum.
    A datum whose logprobs do not line up is a ValueError (`action_token_logprobs`)."""
    import torch

    action_token_logprobs(data_D, training_logprobs_D, "training")  # shape check only
    diffs: dict[int, list[torch.Tensor]] = {}
    depths: dict[int, list[int]] = {}
    for datum, training_T in zip(data_D, training_logprobs_D, strict=True):
        sampled_T = datum.loss_fn_inputs["logprobs"].to_torch().double().reshape(-1)
        trained_T = training_T.detach().double().reshape(-1)
        for turn, (start, end) in enumerate(action_runs(datum.loss_fn_inputs["mask"].to_torch().reshape(-1))):
            diffs.setdefault(turn, []).append(sampled_T[start:end] - trained_T[start:end])
            depths.setdefault(turn, []).append(start)
    rows = []
    for turn in sorted(diffs):
        d_N = torch.cat(diffs[turn])
        rows.append(
            TurnAgreement(
                turn=turn,
                tokens=int(d_N.numel()),
                depth=sum(depths[turn]) / len(depths[turn]),
                kl_v1=float(d_N.mean()),
                kl_v2=float(0.5 * (d_N**2).mean()),
                max_abs_diff=float(d_N.abs().max()),
            )
        )
    return rows
