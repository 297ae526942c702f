"""The numerics check of RL: does the trainer compute the logprobs the sampler sampled with?

On-policy, before the update, the trainer's weights are the sampler's, so every action token's
training logprob should equal its sampling logprob up to float rounding. `CheckLogprobAgreement`
scores the step's datums with one `forward` and compares them turn by turn
(`train_core.rl.numerics`), so a long episode shows whether agreement holds at every depth.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kitchen.engine.config.sections import Section
from kitchen.engine.context import Context
from kitchen.engine.ports import TrainingClient
from kitchen.engine.stage import Stage
from train_core.rl.numerics import turn_agreement
from train_core.rl.policy_objective import PROXIMAL_LOSS, PolicyUpdate, training_logprobs
from train_core.types import Datum

FP32_LOGPROB_TOLERANCE = 1e-4
"""The local backend's stated agreement of sampling, scoring and training logprobs in float32
(its contract tests' `LOGPROB_ATOL`)."""


class NumericsSettings(Section):
    """Config section `numerics`: what the sampler/trainer agreement check reports."""

    tolerance: float = Field(
        FP32_LOGPROB_TOLERANCE,
        gt=0,
        description="largest |sampling - training logprob| that counts as agreeing (float32 on local: 1e-4)",
    )
    print_turns: Literal["all", "summary"] = Field(
        "all", description="log every turn's row (all) or only the step's worst turn (summary)"
    )


class CheckLogprobAgreement(Stage):
    """Score the step's datums with the trainer (one `forward`, before the update) and compare
    with their sampling logprobs per turn: `numerics/kl_v1|kl_v2|max_abs_diff` over the batch,
    the same for the first and the deepest turn, `numerics/turns`, `numerics/within_tolerance`
    (1 when every token agrees within `numerics.tolerance`), and one `numerics.turn` log line per
    turn (depth, tokens, KL, max |diff|). A mismatch is measured and reported, not raised: a
    backend in bfloat16 is expected to differ."""

    calls = (TrainingClient.forward,)

    async def run(
        self,
        ctx: Context,
        rl_data: list[Datum],
        training_client: TrainingClient,
        policy_update: PolicyUpdate,
        numerics: NumericsSettings,
    ) -> None:
        if not rl_data:
            return
        scored = await training_client.forward(policy_update.proximal_request(rl_data), PROXIMAL_LOSS)
        rows = turn_agreement(rl_data, training_logprobs([await scored]))
        if not rows:
            return
        worst = max(rows, key=lambda r: r.max_abs_diff)
        tokens = sum(r.tokens for r in rows)
        ctx.record(
            {
                "numerics/kl_v1": sum(r.kl_v1 * r.tokens for r in rows) / tokens,
                "numerics/kl_v2": sum(r.kl_v2 * r.tokens for r in rows) / tokens,
                "numerics/max_abs_diff": worst.max_abs_diff,
                "numerics/first_turn_max_abs_diff": rows[0].max_abs_diff,
                "numerics/last_turn_max_abs_diff": rows[-1].max_abs_diff,
                "numerics/last_turn_depth": rows[-1].depth,
                "numerics/turns": float(len(rows)),
                "numerics/within_tolerance": float(worst.max_abs_diff <= numerics.tolerance),
            }
        )
        for row in rows if numerics.print_turns == "all" else [worst]:
            ctx.log.info(
                "numerics.turn",
                step=ctx.step,
                turn=row.turn,
                depth=round(row.depth),
                tokens=row.tokens,
                kl_v1=f"{row.kl_v1:.3e}",
                max_abs_diff=f"{row.max_abs_diff:.3e}",
            )
        if worst.max_abs_diff > numerics.tolerance:
            ctx.log.warning(
                "numerics.mismatch",
                step=ctx.step,
                turn=worst.turn,
                depth=round(worst.depth),
                max_abs_diff=f"{worst.max_abs_diff:.3e}",
                tolerance=numerics.tolerance,
            )
