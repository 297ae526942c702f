"""LoRA training clients of one base model on the local backend (`adapters.local.lora_group`): they
share its weights and one worker, their waiting forward passes run as one batched pass, and each
trains exactly as it would alone (its own loss, gradients and optimizer)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import torch

from adapters.local import LocalBackend
from adapters.local.training_client import LocalTrainingClient, TrainingOptions
from tests.adapters.local.conftest import MakeDatum
from train_core.types import AdamParams, Datum, LoraLayers

STEPS = 3
Trained = tuple[list[float], list[list[float]], dict[str, torch.Tensor], set[str]]
"""A client's losses, its logprobs after training, its trained weights, and its metrics' names."""
LAYERS = (LoraLayers(), LoraLayers(attn=True, mlp=False, unembed=True), LoraLayers(attn=False, mlp=True))


def _batch(client: int, token_lists: list[list[int]], make_datum: MakeDatum) -> list[Datum]:
    """Each client's own batch: the fixed texts shifted by its index (an RL-like pair shares a prompt)."""
    rows = [[(t + 37 * client) % 1400 + 50 for t in tokens] for tokens in token_lists]
    rows.append(rows[0] + [11, 12, 13])
    return [make_datum(tokens, weights=[1.0] * (len(tokens) - 1)) for tokens in rows]


async def _create(backend: LocalBackend, client: int) -> LocalTrainingClient:
    made = await backend.create_lora_training_client("tiny", 4 + 2 * client, 10 + client, LAYERS[client])
    assert isinstance(made, LocalTrainingClient)
    return made


async def _train(client: LocalTrainingClient, data: list[Datum], steps: int) -> Trained:
    losses, keys = [], set()
    for _ in range(steps):
        fb = await client.forward_backward(data, "cross_entropy")
        opt = await client.optim_step(AdamParams(learning_rate=0.02))
        metrics = (await fb).metrics
        losses.append(metrics["loss:sum"])
        keys |= set(metrics)
        await opt
    out = await (await client.forward(data, "cross_entropy"))
    weights = {name: p.detach().clone() for name, p in client._model.named_parameters() if p.requires_grad}
    return losses, [list(o["logprobs"].data) for o in out.loss_fn_outputs], weights, keys


def test_clients_trained_together_train_as_they_would_alone(
    tmp_path: Path, token_lists: list[list[int]], make_datum: MakeDatum
) -> None:
    batches = [_batch(k, token_lists, make_datum) for k in range(3)]

    async def alone() -> list[Trained]:
        results = []
        for k in range(3):  # each on a backend of its own: nobody to batch with
            backend = LocalBackend(tmp_path / f"alone{k}", device="cpu")
            results.append(await _train(await _create(backend, k), batches[k], STEPS))
            await backend.close()
        return results

    async def together() -> tuple[list[Trained], list[int]]:
        backend = LocalBackend(tmp_path / "together", device="cpu")
        clients = [await _create(backend, k) for k in range(3)]
        group = backend._lora_groups["tiny"]
        gate = threading.Event()
        held = group.lane().submit(lambda: gate.wait(30))  # holds the worker: the first requests wait together
        runs = [asyncio.ensure_future(_train(c, b, STEPS)) for c, b in zip(clients, batches, strict=True)]
        await asyncio.sleep(0.1)
        gate.set()
        await held
        results = list(await asyncio.gather(*runs))
        shared = {p.data_ptr() for p in group.base.parameters()}
        for client in clients:
            frozen = [p for p in client._model.parameters() if not p.requires_grad]
            assert all(p.data_ptr() in shared for p in frozen)  # one copy of the base
        await backend.close()
        return results, group.worker.batches

    solo = asyncio.run(alone())
    joint, batch_sizes = asyncio.run(together())
    assert max(batch_sizes) == 3  # the three clients' first forward_backward ran as one pass
    for (losses, logprobs, weights, keys), (solo_losses, solo_logprobs, solo_weights, solo_keys) in zip(
        joint, solo, strict=True
    ):
        assert keys == solo_keys  # the same metrics as a pass of its own
        assert losses == pytest.approx(solo_losses, rel=1e-5)
        for row, solo_row in zip(logprobs, solo_logprobs, strict=True):
            torch.testing.assert_close(torch.tensor(row), torch.tensor(solo_row), rtol=1e-5, atol=1e-6)
        assert weights.keys() == solo_weights.keys()  # each trained its own adapters, on its own layers
        for name, weight in weights.items():
            # Adam divides each gradient element by its own size, so rounding in a tiny element moves
            # its step: the tolerance is 1/2000 of the 3 steps' largest move (3 * learning rate)
            torch.testing.assert_close(weight, solo_weights[name], rtol=1e-5, atol=3e-5, msg=name)
        assert losses[-1] < losses[0]
    assert len({tuple(result[1][0]) for result in joint}) == 3  # each client its own answers


def test_clients_that_need_their_own_passes_are_not_grouped(tmp_path: Path) -> None:
    async def main() -> None:
        checkpointed = LocalBackend(
            tmp_path / "gc", device="cpu", training=TrainingOptions(gradient_checkpointing=True)
        )
        await checkpointed.create_lora_training_client("tiny", 4, 0, LoraLayers())
        assert not checkpointed._lora_groups
        await checkpointed.close()
        plain = LocalBackend(tmp_path / "plain", device="cpu")
        await plain.create_training_client("tiny", lora_rank=None)  # full fine-tuning trains the base
        assert not plain._lora_groups
        await plain.close()

    asyncio.run(main())


def test_clients_made_at_once_join_one_group(tmp_path: Path) -> None:
    """kitchen serve makes each tenant's client on a thread of its own: they still share one base."""

    async def main() -> None:
        backend = LocalBackend(tmp_path, device="cpu")
        made = await asyncio.gather(
            *(backend.create_lora_training_client("tiny", 4, seed, LoraLayers()) for seed in range(4))
        )
        assert list(backend._lora_groups) == ["tiny"]
        shared = {p.data_ptr() for p in backend._lora_groups["tiny"].base.parameters()}
        for client in made:
            assert isinstance(client, LocalTrainingClient)
            assert all(p.data_ptr() in shared for p in client._model.parameters() if not p.requires_grad)
        await backend.close()

    asyncio.run(main())
