"""LocalTrainingClient: losses, gradient accumulation, AdamW, custom losses, ordering, errors."""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from adapters.local import LocalBackend
from adapters.local.training_client import TrainingOptions
from kitchen.engine.errors import DataError
from kitchen.engine.ports import TrainingClient
from train_core.errors import InvalidInputError
from train_core.losses import LOSS_SPECS, get_loss_fn
from train_core.types import AdamParams, Datum, ForwardBackwardOutput, ModelInput, TensorData

_CONFIGS: dict[str, dict[str, float] | None] = {"dro": {"beta": 0.1}}


async def _forward(client: TrainingClient, data: Sequence[Datum], loss_fn: str = "cross_entropy") -> list[list[float]]:
    out = await (await client.forward(data, loss_fn, _CONFIGS.get(loss_fn)))
    return [list(o["logprobs"].tolist()) for o in out.loss_fn_outputs]


async def _saved_weights(client: TrainingClient, name: str) -> dict[str, torch.Tensor]:
    return load_file(Path(await (await client.save_weights_for_sampler(name))) / "weights.safetensors")


@pytest.mark.parametrize("loss_fn", sorted(LOSS_SPECS))
def test_forward_backward_returns_target_logprobs_and_the_summed_loss(
    backend: LocalBackend, sl_batch: list[Datum], rl_batch: list[Datum], loss_fn: str
) -> None:
    data = sl_batch if loss_fn == "cross_entropy" else rl_batch

    async def run() -> tuple[ForwardBackwardOutput, list[list[float]]]:
        client = await backend.create_training_client("tiny")
        out = await (await client.forward_backward(data, loss_fn, _CONFIGS.get(loss_fn)))
        return out, await _forward(client, data, loss_fn)

    out, forward_logprobs = asyncio.run(run())
    assert len(out.loss_fn_outputs) == len(data)
    for output, datum, expected in zip(out.loss_fn_outputs, data, forward_logprobs, strict=True):
        assert output["logprobs"].shape == (datum.model_input.length,)
        assert all(lp < 0 for lp in output["logprobs"].tolist())
        assert output["logprobs"].tolist() == pytest.approx(expected, abs=1e-5)
    # The reported loss is the train_core formula applied to every token of every datum.
    spec = get_loss_fn(loss_fn)
    logprobs_T = torch.cat([o["logprobs"].to_torch() for o in out.loss_fn_outputs]).double()
    inputs = {k: torch.cat([d.loss_fn_inputs[k].to_torch() for d in data]).double() for k in spec.input_keys}
    lengths_D = [d.model_input.length for d in data]
    expected_loss, _ = spec(logprobs_T, inputs, _CONFIGS.get(loss_fn), lengths_D)
    assert out.metrics["loss:sum"] == pytest.approx(float(expected_loss), rel=1e-5)


def test_gradients_accumulate_across_calls_until_optim_step(backend: LocalBackend, sl_batch: list[Datum]) -> None:
    """Two half-batch calls then one step == one full-batch call then one step (losses are sums)."""
    adam = AdamParams(learning_rate=1e-2, eps=1.0)  # a large eps keeps the update proportional to the gradient

    async def run() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        split = await backend.create_training_client("tiny")
        await split.forward_backward(sl_batch[:2], "cross_entropy")
        await split.forward_backward(sl_batch[2:], "cross_entropy")
        await (await split.optim_step(adam))
        whole = await backend.create_training_client("tiny")
        await whole.forward_backward(sl_batch, "cross_entropy")
        await (await whole.optim_step(adam))
        return await _saved_weights(split, "split"), await _saved_weights(whole, "whole")

    split, whole = asyncio.run(run())
    assert all(torch.allclose(split[key], whole[key], atol=1e-6) for key in whole)
    initial = asyncio.run(_initial_weights(backend))
    assert any(not torch.allclose(whole[key], initial[key]) for key in whole)


async def _initial_weights(backend: LocalBackend) -> dict[str, torch.Tensor]:
    return await _saved_weights(await backend.create_training_client("tiny"), "initial")


def test_loss_decreases_over_a_few_steps_on_a_fixed_batch(backend: LocalBackend, sl_batch: list[Datum]) -> None:
    async def run() -> list[float]:
        client = await backend.create_training_client("tiny")
        losses = []
        for _ in range(8):
            out = await (await client.forward_backward(sl_batch, "cross_entropy"))
            await (await client.optim_step(AdamParams(learning_rate=3e-3)))
            losses.append(out.metrics["loss:sum"])
        return losses

    losses = asyncio.run(run())
    assert losses[-1] < 0.8 * losses[0]
    assert all(later < earlier for earlier, later in itertools.pairwise(losses))


def test_weight_decay_shrinks_weights_that_get_zero_gradient(
    backend: LocalBackend, make_datum: Callable[..., Datum], token_lists: list[list[int]]
) -> None:
    zero_weight = [make_datum(tokens, weights=[0.0] * (len(tokens) - 1)) for tokens in token_lists]
    lr, weight_decay = 0.1, 0.5

    async def run() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        client = await backend.create_training_client("tiny")
        before = await _saved_weights(client, "before")
        await client.forward_backward(zero_weight, "cross_entropy")
        await (await client.optim_step(AdamParams(learning_rate=lr, weight_decay=weight_decay)))
        return before, await _saved_weights(client, "after")

    before, after = asyncio.run(run())
    for key in before:  # decoupled decay: w <- w * (1 - lr * wd); Adam's own update is 0 for a 0 gradient
        assert torch.allclose(after[key], before[key] * (1 - lr * weight_decay), atol=1e-7)


def test_grad_clip_caps_the_gradient_norm_the_optimizer_sees(tmp_path: Path, sl_batch: list[Datum]) -> None:
    beta1, clip = 0.9, 0.5
    # Without clipping the norm is computed only when asked for (it costs a pass over the gradients).
    backend = LocalBackend(tmp_path, device="cpu", training=TrainingOptions(always_grad_norm=True))

    async def run(grad_clip_norm: float) -> tuple[float, float]:
        client = await backend.create_training_client("tiny")
        await client.forward_backward(sl_batch, "cross_entropy")
        step = await (await client.optim_step(AdamParams(1e-3, beta1=beta1, grad_clip_norm=grad_clip_norm)))
        state = torch.load(Path(await (await client.save_state("s"))) / "optimizer.pt", weights_only=True)
        # After one step, exp_avg = (1 - beta1) * gradient, so it reveals the gradient that was applied.
        applied = math.sqrt(sum(float(s["exp_avg"].pow(2).sum()) for s in state["state"].values()))
        return step.metrics["grad_norm"], applied / (1 - beta1)

    reported, applied = asyncio.run(run(clip))
    assert reported > clip  # the metric is the norm before clipping
    assert applied == pytest.approx(clip, rel=1e-4)
    reported_unclipped, applied_unclipped = asyncio.run(run(0.0))
    assert applied_unclipped == pytest.approx(reported_unclipped, rel=1e-4)
    assert reported_unclipped == pytest.approx(reported, rel=1e-5)
    asyncio.run(backend.close())


def test_without_clipping_the_gradient_norm_is_not_computed(backend: LocalBackend, sl_batch: list[Datum]) -> None:
    async def run() -> dict[str, float]:
        client = await backend.create_training_client("tiny")
        await client.forward_backward(sl_batch, "cross_entropy")
        return (await (await client.optim_step(AdamParams(1e-3)))).metrics

    metrics = asyncio.run(run())
    assert "grad_norm" not in metrics
    assert metrics["learning_rate"] == 1e-3


def test_zero_learning_rate_changes_nothing_and_gradients_are_cleared_after_a_step(
    backend: LocalBackend, sl_batch: list[Datum]
) -> None:
    async def run() -> tuple[list[list[float]], list[list[float]], float]:
        client = await backend.create_training_client("tiny")
        before = await _forward(client, sl_batch)
        await client.forward_backward(sl_batch, "cross_entropy")
        await client.optim_step(AdamParams(learning_rate=0.0))
        after = await _forward(client, sl_batch)
        second = await (await client.optim_step(AdamParams(learning_rate=1e-3)))  # no gradients left
        return before, after, second.metrics["grad_norm"]

    before, after, grad_norm = asyncio.run(run())
    assert after == before
    assert grad_norm == 0.0


def test_custom_loss_differentiates_straight_through_the_logprobs(backend: LocalBackend, sl_batch: list[Datum]) -> None:
    """A custom loss equal to cross-entropy trains exactly as the built-in one does."""

    def custom(data: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        weights_D = [d.loss_fn_inputs["weights"].to_torch() for d in data]
        loss = -sum((lp * w).sum() for lp, w in zip(logprobs_D, weights_D, strict=True))
        assert isinstance(loss, torch.Tensor)
        return loss, {"custom_metric": 3.0}

    adam = AdamParams(learning_rate=1e-2, eps=1.0)

    async def run() -> tuple[
        ForwardBackwardOutput, ForwardBackwardOutput, dict[str, torch.Tensor], dict[str, torch.Tensor]
    ]:
        built_in = await backend.create_training_client("tiny")
        out_built_in = await (await built_in.forward_backward(sl_batch, "cross_entropy"))
        await built_in.optim_step(adam)
        by_hand = await backend.create_training_client("tiny")
        out_custom = await (await by_hand.forward_backward_custom(sl_batch, custom))
        await by_hand.optim_step(adam)
        return out_built_in, out_custom, await _saved_weights(built_in, "a"), await _saved_weights(by_hand, "b")

    out_built_in, out_custom, weights_built_in, weights_custom = asyncio.run(run())
    assert out_custom.metrics["custom_metric"] == 3.0
    assert out_custom.metrics["loss:sum"] == pytest.approx(out_built_in.metrics["loss:sum"], rel=1e-6)
    for a, b in zip(out_built_in.loss_fn_outputs, out_custom.loss_fn_outputs, strict=True):
        assert a["logprobs"].tolist() == pytest.approx(b["logprobs"].tolist(), abs=1e-6)
    assert all(torch.allclose(weights_built_in[k], weights_custom[k], atol=1e-6) for k in weights_built_in)


def test_custom_loss_without_gradient_is_an_error(backend: LocalBackend, sl_batch: list[Datum]) -> None:
    def detached(data: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        return torch.tensor(1.0), {}

    async def run() -> None:
        client = await backend.create_training_client("tiny")
        await (await client.forward_backward_custom(sl_batch, detached))

    with pytest.raises(InvalidInputError, match="custom loss must return a scalar tensor"):
        asyncio.run(run())


def test_requests_run_in_submission_order_without_blocking_the_loop(
    backend: LocalBackend, sl_batch: list[Datum]
) -> None:
    """Pipelined submissions (no await in between) behave exactly like awaited ones."""

    async def pipelined() -> tuple[list[str], list[list[float]], list[list[float]], bool]:
        client = await backend.create_training_client("tiny")
        finished: list[str] = []
        futures: list[asyncio.Future[Any]] = [
            await client.forward(sl_batch, "cross_entropy"),
            await client.forward_backward(sl_batch, "cross_entropy"),
            await client.optim_step(AdamParams(learning_rate=1e-2)),
            await client.forward(sl_batch, "cross_entropy"),
        ]
        # Submission returned at once: the worker thread cannot have finished all four yet.
        all_done_at_submit = all(f.done() for f in futures)

        def record(label: str) -> Callable[[asyncio.Future[Any]], None]:
            return lambda _: finished.append(label)

        for label, future in zip(("fwd0", "fb", "step", "fwd1"), futures, strict=True):
            future.add_done_callback(record(label))
        results = await asyncio.gather(*futures)
        await asyncio.sleep(0)  # let the done-callbacks run
        before = [list(o["logprobs"].tolist()) for o in results[0].loss_fn_outputs]
        after = [list(o["logprobs"].tolist()) for o in results[3].loss_fn_outputs]
        return finished, before, after, all_done_at_submit

    async def sequential() -> list[list[float]]:
        client = await backend.create_training_client("tiny")
        await (await client.forward_backward(sl_batch, "cross_entropy"))
        await (await client.optim_step(AdamParams(learning_rate=1e-2)))
        return await _forward(client, sl_batch)

    finished, before, after, all_done_at_submit = asyncio.run(pipelined())
    assert finished == ["fwd0", "fb", "step", "fwd1"]
    assert not all_done_at_submit
    assert after != before  # the last forward saw the optimizer step submitted before it
    assert after == asyncio.run(sequential())


def test_unknown_loss_is_an_error_never_cross_entropy(backend: LocalBackend, rl_batch: list[Datum]) -> None:
    async def run() -> None:
        client = await backend.create_training_client("tiny")
        await client.forward_backward(rl_batch, "grpo")

    with pytest.raises(InvalidInputError, match="unknown loss_fn 'grpo'"):
        asyncio.run(run())


@pytest.mark.parametrize(
    ("loss_fn", "drop", "match"),
    [
        ("ppo", "advantages", r"datum 0: loss 'ppo' needs loss_fn_inputs\['advantages'\]"),
        ("importance_sampling", "logprobs", r"datum 0: loss 'importance_sampling' needs loss_fn_inputs\['logprobs'\]"),
        ("cross_entropy", "target_tokens", r"datum 0: loss 'cross_entropy' needs loss_fn_inputs\['target_tokens'\]"),
    ],
)
def test_missing_loss_input_is_an_error_naming_the_key(
    backend: LocalBackend, sl_batch: list[Datum], rl_batch: list[Datum], loss_fn: str, drop: str, match: str
) -> None:
    data = sl_batch if loss_fn == "cross_entropy" else rl_batch
    broken = [Datum(d.model_input, {k: v for k, v in d.loss_fn_inputs.items() if k != drop}) for d in data]

    async def run() -> None:
        client = await backend.create_training_client("tiny")
        await client.forward_backward(broken, loss_fn)

    with pytest.raises(InvalidInputError, match=match):
        asyncio.run(run())


def test_malformed_batches_are_data_errors(backend: LocalBackend, sl_batch: list[Datum]) -> None:
    datum = sl_batch[1]
    short_weights = Datum(
        datum.model_input,
        {**datum.loss_fn_inputs, "weights": TensorData.from_list([1.0], "float32")},
    )
    out_of_vocab = Datum(
        ModelInput.from_ints([1, 2]),
        {
            "target_tokens": TensorData.from_list([2, 10**6], "int64"),
            "weights": TensorData.from_list([1.0, 1.0], "float32"),
        },
    )

    async def run(data: list[Datum]) -> None:
        client = await backend.create_training_client("tiny")
        await client.forward_backward(data, "cross_entropy")

    with pytest.raises(DataError, match=r"datum 1: loss_fn_inputs\['weights'\] has shape \(1,\)"):
        asyncio.run(run([sl_batch[0], short_weights]))
    with pytest.raises(DataError, match=r"datum 0: target_tokens has token ids \[1000000\] outside"):
        asyncio.run(run([out_of_vocab]))
    with pytest.raises(DataError, match="empty list of datums"):
        asyncio.run(run([]))


def test_bad_loss_config_and_adam_params_are_errors(backend: LocalBackend, rl_batch: list[Datum]) -> None:
    async def run() -> None:
        client = await backend.create_training_client("tiny")
        with pytest.raises(InvalidInputError, match=r"loss 'dro' needs loss_fn_config\['beta'\]"):
            await client.forward_backward(rl_batch, "dro")
        with pytest.raises(InvalidInputError, match="does not accept loss_fn_config keys"):
            await client.forward_backward(rl_batch, "ppo", {"epsilon": 0.2})
        with pytest.raises(InvalidInputError, match=r"beta2 must be in \[0, 1\)"):
            await client.optim_step(AdamParams(beta2=1.0))
        with pytest.raises(InvalidInputError, match="learning_rate must be >= 0"):
            await client.optim_step(AdamParams(learning_rate=-1.0))

    asyncio.run(run())
