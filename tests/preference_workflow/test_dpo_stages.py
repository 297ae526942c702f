"""Single preference stages on a real context: batching over pairs, and the win-rate evaluator."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.noop import NoopBackend
from kitchen.engine.context import Context
from kitchen.engine.runner import run_stage
from kitchen.engine.stage import Stage
from kitchen.families.common.completers import as_async_judge
from kitchen.families.preference.stages import EvaluateWinRate, GetPreferenceBatch
from recipes.dpo import Config
from train_core.renderers.base import Message
from train_core.renderers.registry import get_renderer
from train_core.types import AdamParams


def _run(stage: Stage, ctx: Context) -> None:
    asyncio.run(run_stage(stage, ctx))


@settings(max_examples=50, deadline=None)
@given(num_pairs=st.integers(1, 40), batch_size=st.integers(1, 8), seed=st.integers(0, 3), epoch=st.integers(0, 2))
def test_batches_keep_pairs_together_and_cover_an_epoch_once(
    num_pairs: int, batch_size: int, seed: int, epoch: int
) -> None:
    per_epoch = num_pairs // batch_size
    data = [f"{side}{pair}" for pair in range(num_pairs) for side in ("chosen", "rejected")]
    config = Config.model_validate({"data": {"batch_size": batch_size}, "seed": seed})
    ctx = Context(config, {}, {"train_data": data})
    seen: list[int] = []
    for step in range(epoch * per_epoch, (epoch + 1) * per_epoch):
        ctx.step = step
        _run(GetPreferenceBatch(), ctx)
        batch = ctx.state["batch"]
        assert len(batch) == 2 * batch_size
        pairs = [int(name.removeprefix("chosen")) for name in batch[0::2]]
        assert batch[1::2] == [f"rejected{pair}" for pair in pairs]
        seen.extend(pairs)
        _run(GetPreferenceBatch(), ctx)
        assert ctx.state["batch"] == batch, "the same step must give the same batch"
    assert len(seen) == len(set(seen)) == per_epoch * batch_size


class RecordingJudge:
    """Prefers completion B whatever it says (a judge with pure position bias), and keeps every
    question it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str]] = []

    def __call__(self, prompt: Sequence[Message], completion_A: Message, completion_B: Message) -> float:
        self.asked.append((prompt[-1]["content"], completion_A["content"], completion_B["content"]))
        return 1.0


def _win_rate_context(tmp_path: Path, train_steps: int) -> tuple[Context, NoopBackend]:
    async def clients() -> tuple[Any, Any]:
        training = await backend.create_training_client("tiny")
        reference = await training.save_weights_and_get_sampling_client()
        for _ in range(train_steps):
            await (await training.optim_step(AdamParams()))
        return training, reference

    backend = NoopBackend(checkpoint_dir=tmp_path)
    training, reference = asyncio.run(clients())
    prompts = [[Message(role="user", content=f"What is {i} + 1?")] for i in range(5)]
    state = {
        "training_client": training,
        "reference_client": reference,
        "renderer": get_renderer("role_colon", backend.get_tokenizer("tiny")),
        "eval_prompts": prompts,
    }
    config = Config.model_validate({"backend": "noop", "win_rate": {"prompts": 4, "max_tokens": 6}})
    return Context(config, {}, state), backend


def test_win_rate_asks_both_orderings_which_cancels_position_bias(tmp_path: Path) -> None:
    ctx, _ = _win_rate_context(tmp_path, train_steps=1)
    judge = RecordingJudge()
    ctx.state["judge"] = as_async_judge(judge)
    _run(EvaluateWinRate(), ctx)
    ctx.metrics.flush()
    row = ctx.metrics.rows[0]
    assert row["eval/win_rate"] == 0.5 and row["eval/win_rate_stderr"] == 0.0
    assert row["eval/win_rate_prompts"] == 4
    first_half, second_half = judge.asked[:4], judge.asked[4:]
    assert [q for q, _, _ in first_half] == [f"What is {i} + 1?" for i in range(4)]
    assert second_half == [(q, b, a) for q, a, b in first_half], "the second ordering swaps A and B"
    assert any(a != b for _, a, b in first_half), "policy and reference replies should differ after a step"


def test_untrained_policy_ties_the_reference(tmp_path: Path) -> None:
    ctx, _ = _win_rate_context(tmp_path, train_steps=0)
    judge = RecordingJudge()
    ctx.state["judge"] = as_async_judge(judge)
    _run(EvaluateWinRate(), ctx)
    assert all(a == b for _, a, b in judge.asked), "same weights and seed must give the same reply"
