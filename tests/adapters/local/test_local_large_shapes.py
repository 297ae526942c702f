"""The local backend at real shapes on the CPU: Qwen3-0.6B's config (random weights, the real
151,936-token vocabulary, tied head), one step each of SFT, DPO and RL. It needs ~11 GB and most
of the CPU for ~2 minutes, so it runs only when selected by itself: `pytest -m alone`."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from adapters.local import LocalBackend
from benchmarks._models import build_qwen3
from train_core.types import AdamParams, Datum, ModelInput, TensorData

pytestmark = [pytest.mark.slow, pytest.mark.alone]
VOCAB = 151_936


@pytest.fixture(autouse=True)
def _selected_alone(request: pytest.FixtureRequest) -> None:
    if "alone" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("needs ~11 GB and most of the CPU: run it by itself, `pytest -m alone`")


def _datum(rng: random.Random, tokens: list[int], **per_token: list[float]) -> Datum:
    inputs = {"target_tokens": TensorData.from_list(tokens[1:], "int64")}
    inputs |= {key: TensorData.from_list(values, "float32") for key, values in per_token.items()}
    return Datum(ModelInput.from_ints(tokens[:-1]), inputs)


def test_sft_dpo_and_rl_steps_at_0_6b_shapes(tmp_path: Path) -> None:
    rng = random.Random(0)
    model = build_qwen3(tmp_path / "qwen3-0.6b", "0.6b")
    backend = LocalBackend(tmp_path / "checkpoints", device="cpu", dtype="float32")

    def tokens(n: int) -> list[int]:
        return [rng.randrange(1, VOCAB) for _ in range(n)]

    sft = [_datum(rng, t, weights=[1.0] * 32) for t in (tokens(33) for _ in range(4))]
    prompt = tokens(24)
    dpo = [_datum(rng, prompt + tokens(9)) for _ in range(4)]
    rl = [
        _datum(rng, prompt + t[24:], logprobs=[-11.0] * 32, advantages=[(-1.0) ** i] * 32)
        for i, t in enumerate(prompt + tokens(9) for _ in range(4))
    ]

    def dpo_loss(data: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        sums = torch.stack([lp[23:].sum() for lp in logprobs_D])
        return -torch.nn.functional.logsigmoid(0.1 * (sums[0::2] - sums[1::2])).sum(), {}

    async def run() -> list[tuple[float, float]]:
        client: Any = await backend.create_training_client(model)
        outcomes = []
        for call in (
            lambda: client.forward_backward(sft, "cross_entropy"),
            lambda: client.forward_backward_custom(dpo, dpo_loss),
            lambda: client.forward_backward(rl, "importance_sampling"),
        ):
            before = client._masters.masters[-1].detach().clone()
            out = await (await call())
            step = await (await client.optim_step(AdamParams(learning_rate=1e-5, grad_clip_norm=1.0)))
            moved = float((client._masters.masters[-1] != before).float().mean())
            outcomes.append((out.metrics["loss:sum"], moved))
            assert "nonfinite_step" not in step.metrics
        return outcomes

    try:
        outcomes = asyncio.run(run())
    finally:
        asyncio.run(backend.close())
    for loss, moved in outcomes:
        assert torch.isfinite(torch.tensor(loss)) and moved > 0.5
