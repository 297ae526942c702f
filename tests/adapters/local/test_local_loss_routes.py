"""On the local backend (tiny model): every loss aggregation mode gives the same gradient through
the built-in route (factors folded into the datums, summing loss) and the custom route
(`forward_backward_custom` with the aggregated objective); the clip fractions a clipping loss
reports, merged over micro-batches."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from adapters.local import LocalBackend
from adapters.local.training_client import TrainingOptions
from kitchen.engine.ports import TrainingClient
from train_core.losses import loss_ratios
from train_core.rl.policy_objective import AGGREGATION_MODES, PolicyObjective
from train_core.types import AdamParams, Datum, ForwardBackwardOutput, TensorData

# lr 1 and eps 1: the first AdamW update is g / (|g| + 1), one to one with the gradient, so equal
# weights after it mean equal gradients (to ~1e-6 here).
_ADAM = AdamParams(learning_rate=1.0, eps=1.0)
_OFFSETS = (-1.5, 0.0, 0.4, 2.0)
"""Sampling logprob minus current: ratios e^1.5, 1, e^-0.4, e^-2 cover every clip branch."""


async def _rl_data(client: TrainingClient, sl_batch: list[Datum]) -> list[Datum]:
    """RL datums on the fixed texts: sampled logprobs offset from the model's own, the last half
    of each datum's targets the action tokens, advantages +1 / -1 by datum."""
    out = await (await client.forward(sl_batch, "cross_entropy"))
    data = []
    for d, (datum, output) in enumerate(zip(sl_batch, out.loss_fn_outputs, strict=True)):
        lps = output["logprobs"].tolist()
        n = len(lps)
        mask = [float(i >= n // 2) for i in range(n)]
        sign = 1.0 if d % 2 == 0 else -1.0
        inputs = {
            "target_tokens": datum.loss_fn_inputs["target_tokens"],
            "logprobs": TensorData.from_list([lp + _OFFSETS[i % 4] for i, lp in enumerate(lps)], "float32"),
            "advantages": TensorData.from_list([sign * m for m in mask], "float32"),
            "mask": TensorData.from_list(mask, "float32"),
        }
        data.append(Datum(datum.model_input, inputs))
    return data


async def _updated(client: TrainingClient, name: str) -> dict[str, torch.Tensor]:
    await (await client.optim_step(_ADAM))
    return load_file(Path(await (await client.save_weights_for_sampler(name))) / "weights.safetensors")


def test_both_routes_give_the_same_gradient_in_every_aggregation_mode(
    backend: LocalBackend, sl_batch: list[Datum]
) -> None:
    async def run() -> dict[str, tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], float, float]]:
        data = await _rl_data(await backend.create_training_client("tiny"), sl_batch)
        results: dict[str, tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], float, float]] = {}
        for mode in AGGREGATION_MODES:
            objective = PolicyObjective("ppo", {"clip_ratio_c": 3.0}, aggregation=mode, norm_tokens=16)
            builtin = await backend.create_training_client("tiny")
            out_b = await (await builtin.forward_backward(objective.builtin_data(data), "ppo", {"clip_ratio_c": 3.0}))
            custom = await backend.create_training_client("tiny")
            out_c = await (await custom.forward_backward_custom(data, objective.custom_loss_fn()))
            weights_b, weights_c = await _updated(builtin, f"b-{mode}"), await _updated(custom, f"c-{mode}")
            results[mode] = (weights_b, weights_c, out_b.metrics["loss:sum"], out_c.metrics["loss:sum"])
        return results

    results = asyncio.run(run())
    for mode, (weights_b, weights_c, loss_b, loss_c) in results.items():
        assert loss_c == pytest.approx(loss_b, rel=1e-4, abs=1e-6), mode
        assert all(torch.allclose(weights_b[k], weights_c[k], atol=1e-6) for k in weights_b), mode
    # Not vacuous: the modes train differently.
    token_mean, seq_mean = results["token_mean"][0], results["seq_mean_token_mean"][0]
    assert any(not torch.allclose(token_mean[k], seq_mean[k], atol=1e-5) for k in token_mean)


def _clip_metrics(out: ForwardBackwardOutput) -> dict[str, float]:
    """The backend's loss counts and the fractions they mean (`loss_ratios`, as a step reports them)."""
    counts = {k: v for k, v in out.metrics.items() if k.startswith("loss/")}
    assert all(key.endswith(":sum") for key in counts)
    return {**counts, **loss_ratios(counts)}


def test_clip_fractions_are_reported_and_merge_exactly_over_micro_batches(
    tmp_path: Path, sl_batch: list[Datum]
) -> None:
    """One batch, and the same batch cut into micro-batches of about one datum: the same counts
    and fractions (counts add up; fractions are recomputed, not averaged)."""
    whole = LocalBackend(checkpoint_dir=tmp_path / "a", device="cpu")
    split = LocalBackend(
        checkpoint_dir=tmp_path / "b", device="cpu", training=TrainingOptions(max_tokens_per_microbatch=16)
    )

    async def run() -> tuple[ForwardBackwardOutput, ForwardBackwardOutput, list[Datum]]:
        data = await _rl_data(await whole.create_training_client("tiny"), sl_batch)
        builtin = PolicyObjective("ppo", {"clip_ratio_c": 3.0}).builtin_data(data)
        one = await (await (await whole.create_training_client("tiny")).forward(builtin, "ppo", {"clip_ratio_c": 3.0}))
        many = await (await (await split.create_training_client("tiny")).forward(builtin, "ppo", {"clip_ratio_c": 3.0}))
        return one, many, data

    try:
        one, many, data = asyncio.run(run())
    finally:
        asyncio.run(whole.close())
        asyncio.run(split.close())
    metrics = _clip_metrics(one)
    assert metrics == pytest.approx(_clip_metrics(many))
    action_tokens = sum(int(sum(d.loss_fn_inputs["mask"].tolist())) for d in data)
    assert metrics["loss/policy_tokens:sum"] == action_tokens
    # The offsets repeat every 4 tokens, so each clip holds back some tokens but not all.
    for side in ("low", "high", "dual"):
        assert 0 < metrics[f"loss/clipfrac_{side}"] < 1, side
        assert metrics[f"loss/clipfrac_{side}"] == pytest.approx(metrics[f"loss/clipped_{side}:sum"] / action_tokens)


def test_the_custom_route_reports_what_the_tinker_service_reports(backend: LocalBackend, sl_batch: list[Datum]) -> None:
    """`loss:sum`, the linearised `surrogate_loss:sum` = sum(logprob * dC/dlogprob) and the built-in
    route's `padding_fraction:mean`: the keys a custom loss logs through kitchen serve (the SDK's
    two-phase route) are the keys it logs in-process."""

    def squared(data: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        return sum((lp**2).sum() for lp in logprobs_D) / 2, {}  # type: ignore[return-value]

    async def run() -> tuple[ForwardBackwardOutput, ForwardBackwardOutput]:
        client = await backend.create_training_client("tiny")
        builtin = await (await client.forward(sl_batch, "cross_entropy"))
        return builtin, await (await client.forward_backward_custom(sl_batch, squared))

    builtin, custom = asyncio.run(run())
    logprobs_D = [out["logprobs"].to_torch() for out in builtin.loss_fn_outputs]
    # C = sum(lp^2) / 2, so dC/dlp = lp and the surrogate is sum(lp^2) = 2 C
    assert custom.metrics["surrogate_loss:sum"] == pytest.approx(2 * custom.metrics["loss:sum"], rel=1e-5)
    assert custom.metrics["loss:sum"] == pytest.approx(sum(float((lp**2).sum()) for lp in logprobs_D) / 2, rel=1e-5)
    assert custom.metrics["padding_fraction:mean"] == pytest.approx(builtin.metrics["padding_fraction:mean"])
