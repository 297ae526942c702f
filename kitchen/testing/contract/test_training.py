"""Contract: training clients (forward passes, losses, ordering, optimizer steps) on every backend."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import pytest
import torch

from kitchen.engine.ports import ServiceBackend
from kitchen.testing.contract.data import (
    BASE_MODEL,
    LOGPROB_ATOL,
    TRAIN_LR,
    encode_texts,
    forward_logprobs,
    max_abs_diff,
    scored_logprobs,
    sft_batch,
    train_step,
)
from train_core.errors import InvalidInputError
from train_core.losses import get_loss_fn
from train_core.types import AdamParams, Datum, ModelInput, TensorData


@pytest.mark.parametrize("lora_rank", [None, 4])
def test_cross_entropy_outputs_per_datum_logprobs_and_loss_sum(backend: ServiceBackend, lora_rank: int | None) -> None:
    data = sft_batch(backend)

    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL, lora_rank=lora_rank)
        for method in (client.forward, client.forward_backward):
            output = await (await method(data, "cross_entropy"))
            assert len(output.loss_fn_outputs) == len(data)
            expected_loss = 0.0
            for datum, out in zip(data, output.loss_fn_outputs, strict=True):
                logprobs = out["logprobs"]
                assert logprobs.shape == (datum.model_input.length,)
                assert all(math.isfinite(v) and v <= 0.0 for v in logprobs.data)
                weights = datum.loss_fn_inputs["weights"].data
                expected_loss -= sum(lp * w for lp, w in zip(logprobs.data, weights, strict=True))
            assert math.isfinite(output.metrics["loss:sum"])
            assert output.metrics["loss:sum"] == pytest.approx(expected_loss, rel=1e-4)

    asyncio.run(main())


def test_fresh_training_client_scores_like_its_base_model(backend: ServiceBackend) -> None:
    """Full fine-tuning and LoRA (zero-initialised update) both start at the base weights."""
    data = sft_batch(backend)

    async def main() -> None:
        base = await backend.create_sampling_client(base_model=BASE_MODEL)
        full = await backend.create_training_client(BASE_MODEL)
        lora = await backend.create_training_client(BASE_MODEL, lora_rank=4)
        base_D = await scored_logprobs(base, encode_texts(backend))
        assert max_abs_diff(await forward_logprobs(full, data), base_D) <= LOGPROB_ATOL
        assert max_abs_diff(await forward_logprobs(lora, data), base_D) <= LOGPROB_ATOL

    asyncio.run(main())


def test_forward_logprobs_equal_compute_logprobs(backend: ServiceBackend) -> None:
    tokens_D = encode_texts(backend)

    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL)
        await train_step(client, sft_batch(backend))  # compare away from the base weights too
        sampler = await client.save_weights_and_get_sampling_client()
        forward_D = await forward_logprobs(client, sft_batch(backend))
        for tokens, forward_T in zip(tokens_D, forward_D, strict=True):
            scored = await sampler.compute_logprobs(ModelInput.from_ints(tokens))
            assert len(scored) == len(tokens) and scored[0] is None
            assert all(v is not None for v in scored[1:])
            assert max_abs_diff([forward_T], [[float(v) for v in scored[1:] if v is not None]]) <= LOGPROB_ATOL

    asyncio.run(main())


def test_requests_run_in_submission_order(backend: ServiceBackend) -> None:
    """Submit forward, forward_backward, optim_step, forward; await them newest first. The first
    two must see the base weights and the last one the weights after the step."""
    data, tokens_D = sft_batch(backend), encode_texts(backend)

    async def main() -> None:
        base_D = await scored_logprobs(await backend.create_sampling_client(base_model=BASE_MODEL), tokens_D)
        client = await backend.create_training_client(BASE_MODEL)
        before = await client.forward(data, "cross_entropy")
        grad = await client.forward_backward(data, "cross_entropy")
        step = await client.optim_step(AdamParams(learning_rate=TRAIN_LR))
        after = await client.forward(data, "cross_entropy")
        after_out, _, grad_out, before_out = await after, await step, await grad, await before
        before_D, grad_D, after_D = (
            [list(o["logprobs"].data) for o in out.loss_fn_outputs] for out in (before_out, grad_out, after_out)
        )
        stepped_D = await scored_logprobs(await client.save_weights_and_get_sampling_client(), tokens_D)
        assert max_abs_diff(before_D, base_D) <= LOGPROB_ATOL
        assert max_abs_diff(grad_D, base_D) <= LOGPROB_ATOL
        assert max_abs_diff(after_D, stepped_D) <= LOGPROB_ATOL
        assert max_abs_diff(after_D, base_D) > 10 * LOGPROB_ATOL

    asyncio.run(main())


def test_optim_step_changes_logprobs(backend: ServiceBackend) -> None:
    data = sft_batch(backend)

    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL)
        first = await (await client.forward(data, "cross_entropy"))
        await train_step(client, data)
        second = await (await client.forward(data, "cross_entropy"))
        first_D = [list(o["logprobs"].data) for o in first.loss_fn_outputs]
        second_D = [list(o["logprobs"].data) for o in second.loss_fn_outputs]
        assert max_abs_diff(first_D, second_D) > 10 * LOGPROB_ATOL

    asyncio.run(main())


def test_forward_backward_custom_returns_the_custom_metrics(backend: ServiceBackend) -> None:
    """The custom loss sees one logprob tensor per datum (with gradients) matching `forward`."""
    data = sft_batch(backend)
    seen_D: list[list[float]] = []

    def summed_logprob_loss(
        batch: Sequence[Datum], logprobs_D: list[torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        assert len(batch) == len(logprobs_D) == len(data)
        assert all(lp.requires_grad for lp in logprobs_D)
        seen_D.extend(lp.detach().tolist() for lp in logprobs_D)
        total = torch.stack([lp.sum() for lp in logprobs_D]).sum()
        return -total, {"custom/total_logprob": float(total.detach()), "custom/num_data": float(len(batch))}

    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL)
        reference_D = await forward_logprobs(client, data)
        output = await (await client.forward_backward_custom(data, summed_logprob_loss))
        assert output.metrics["custom/num_data"] == len(data)
        assert output.metrics["custom/total_logprob"] == pytest.approx(sum(map(sum, reference_D)), abs=1e-3)
        assert max_abs_diff(seen_D, reference_D) <= LOGPROB_ATOL

    asyncio.run(main())


def test_unknown_loss_name_raises(backend: ServiceBackend) -> None:
    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL)
        with pytest.raises(InvalidInputError, match="not_a_loss"):
            await (await client.forward_backward(sft_batch(backend), "not_a_loss"))

    asyncio.run(main())


def test_missing_loss_input_raises(backend: ServiceBackend) -> None:
    datum = sft_batch(backend)[0]
    without_targets = Datum(datum.model_input, {"weights": datum.loss_fn_inputs["weights"]})

    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL)
        with pytest.raises(InvalidInputError, match="target_tokens"):
            await (await client.forward_backward([without_targets], "cross_entropy"))

    asyncio.run(main())


def test_out_of_vocabulary_target_raises(backend: ServiceBackend) -> None:
    datum = sft_batch(backend)[0]
    targets = TensorData.from_list([10**9] * datum.model_input.length, "int64")  # past any vocabulary
    bad = Datum(datum.model_input, {**datum.loss_fn_inputs, "target_tokens": targets})

    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL)
        with pytest.raises(InvalidInputError, match="target_tokens"):
            await (await client.forward([bad], "cross_entropy"))

    asyncio.run(main())


RL_LOSSES: tuple[tuple[str, dict[str, float] | None], ...] = (
    ("importance_sampling", None),
    ("ppo", None),
    ("cispo", None),
    ("dro", {"beta": 0.5}),
)


def test_rl_losses_report_their_formula_over_the_returned_logprobs(backend: ServiceBackend) -> None:
    """Each RL loss's `loss:sum` is train_core's formula applied to the logprobs the backend returns
    (sampling logprobs set off-policy by alternating offsets so every clip branch is exercised)."""
    base = sft_batch(backend)

    async def main() -> None:
        client = await backend.create_training_client(BASE_MODEL)
        current_D = await forward_logprobs(client, base)
        data = [
            Datum(
                datum.model_input,
                {
                    "target_tokens": datum.loss_fn_inputs["target_tokens"],
                    "logprobs": TensorData.from_list(
                        [lp + (0.5 if t % 2 else -0.5) for t, lp in enumerate(lps)], "float32"
                    ),
                    "advantages": TensorData.from_list([1.0 if d % 2 else -1.0] * len(lps), "float32"),
                },
            )
            for d, (datum, lps) in enumerate(zip(base, current_D, strict=True))
        ]
        inputs = {key: torch.cat([d.loss_fn_inputs[key].to_torch() for d in data]) for key in data[0].loss_fn_inputs}
        for loss_fn, config in RL_LOSSES:
            output = await (await client.forward_backward(data, loss_fn, config))
            returned_T = torch.cat([out["logprobs"].to_torch() for out in output.loss_fn_outputs])
            expected, _ = get_loss_fn(loss_fn)(returned_T, inputs, config)
            assert output.metrics["loss:sum"] == pytest.approx(float(expected), rel=1e-4, abs=1e-4), loss_fn

    asyncio.run(main())
