"""Sampling clients of LoRA clients of one base model (`adapters.local.lora_group`): their waiting
sample requests decode as one batch on the shared base, each row through its own client's
adapters, and each client samples exactly what it samples alone with the same seed."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import torch

from adapters.local import LocalBackend
from adapters.local import sampler as sampler_module
from adapters.local.sampling_client import LocalSamplingClient
from adapters.local.training_client import LocalTrainingClient
from tests.adapters.local.conftest import MakeDatum
from train_core.types import AdamParams, LoraLayers, ModelInput, SampleResult, SamplingParams

LAYERS = (LoraLayers(), LoraLayers(attn=True, mlp=False, unembed=True), LoraLayers(attn=False, mlp=True))
"""Different layers, one with the output head (the SDK's default)."""
PROMPTS = ([5, 80, 200, 31], [5, 80, 200, 31, 7, 99, 150], [5, 80])
"""Different lengths (left padding in the joint prefill); the first tokens alike, so a row given
another client's adapters would show it."""
PARAMS = SamplingParams(max_tokens=12, temperature=1.0, seed=123)


async def _sampler(backend: LocalBackend, client: int, make_datum: MakeDatum) -> LocalSamplingClient:
    """Client `client`'s LoRA (its own rank, layers and seed), trained 3 steps on its own text so
    its adapters are far from zero, and a sampling client on it."""
    return (await _trained(backend, client, make_datum))[1]


async def _trained(
    backend: LocalBackend, client: int, make_datum: MakeDatum
) -> tuple[LocalTrainingClient, LocalSamplingClient]:
    """`_sampler`'s training client, and the sampling client."""
    training = await backend.create_lora_training_client("tiny", 4 + 2 * client, 10 + client, LAYERS[client])
    assert isinstance(training, LocalTrainingClient)
    tokens = [(17 * client + 5 * i) % 300 + 40 for i in range(24)]
    for _ in range(3):
        fb = await training.forward_backward([make_datum(tokens, weights=[1.0] * 23)], "cross_entropy")
        await (await training.optim_step(AdamParams(learning_rate=0.05)))
        await fb
    sampler = await training.save_weights_and_get_sampling_client()
    assert isinstance(sampler, LocalSamplingClient)
    return training, sampler


async def _sample(sampler: LocalSamplingClient, client: int) -> SampleResult:
    return await sampler.sample(ModelInput.from_ints(list(PROMPTS[client])), 2, PARAMS)


@pytest.mark.parametrize("packed", [True, False], ids=["packed-prefill", "padded-prefill"])
def test_clients_sample_together_as_they_sample_alone(
    tmp_path: Path, make_datum: MakeDatum, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prompts prefill packed on the tiny model; left-padded where a model cannot pack (a sliding
    window, linear attention): both lay the rows out differently for the adapters."""
    if not packed:
        monkeypatch.setattr(sampler_module, "takes_packed_mask", lambda model: False)

    async def main() -> tuple[list[SampleResult], list[SampleResult], list[int]]:
        backend = LocalBackend(tmp_path, device="cpu")
        samplers = [await _sampler(backend, k, make_datum) for k in range(3)]
        alone = [await _sample(sampler, k) for k, sampler in enumerate(samplers)]  # one at a time
        group = backend._lora_groups["tiny"]
        shared = {p.data_ptr() for p in group.base.parameters()}
        for sampler in samplers:  # a snapshot copies the adapters only, not the base weights
            frozen = [p for name, p in sampler.lease.model.named_parameters() if "lora_" not in name]
            assert frozen and all(p.data_ptr() in shared for p in frozen)
        worker = group.sampling_worker
        gate = threading.Event()
        held = worker.lane().submit(lambda: gate.wait(30))  # holds the worker: the requests wait together
        runs = [asyncio.ensure_future(_sample(sampler, k)) for k, sampler in enumerate(samplers)]
        await asyncio.sleep(0.1)
        gate.set()
        await held
        together = list(await asyncio.gather(*runs))
        await backend.close()
        return alone, together, worker.batches

    alone, together, batch_sizes = asyncio.run(main())
    assert batch_sizes.count(1) >= 3 and max(batch_sizes) == 3  # alone one by one, then one joint decode
    for solo, joint in zip(alone, together, strict=True):
        for solo_sequence, joint_sequence in zip(solo.sequences, joint.sequences, strict=True):
            assert joint_sequence.tokens == solo_sequence.tokens
            torch.testing.assert_close(
                torch.tensor(joint_sequence.logprobs), torch.tensor(solo_sequence.logprobs), rtol=1e-5, atol=1e-5
            )
    # the adapters matter: the clients' first sample tokens are each drawn at the same uniforms
    # (same seed) after a shared prompt start, yet their logprobs differ
    first_logprobs = [result.sequences[0].logprobs[0] for result in alone]
    assert len({round(value, 4) for value in first_logprobs}) == 3


def test_grouped_snapshots_copy_only_adapters_until_a_model_is_needed(tmp_path: Path, make_datum: MakeDatum) -> None:
    """A sampling client of a grouped LoRA client holds copies of the adapters alone: samples that
    decode with other clients' never make it a model; one that decodes alone makes it then, with
    the weights of the snapshot (not the training client's newer ones), and samples as the
    snapshot's adapters on the group's host do."""

    async def main() -> None:
        backend = LocalBackend(tmp_path, device="cpu")
        clients = [await _trained(backend, k, make_datum) for k in range(2)]
        samplers = [sampler for _, sampler in clients]
        group = backend._lora_groups["tiny"]
        worker = group.sampling_worker
        gate = threading.Event()
        held = worker.lane().submit(lambda: gate.wait(30))
        runs = [asyncio.ensure_future(_sample(sampler, k)) for k, sampler in enumerate(samplers)]
        await asyncio.sleep(0.1)
        gate.set()
        await held
        together = await asyncio.gather(*runs)
        assert worker.batches[-1] == 2  # one joint decode
        pools = [training._samplers for training, _ in clients]
        assert [pool.copies_made if pool else None for pool in pools] == [0, 0]  # no model made for either
        # the training client moves on; the snapshot keeps its weights
        first = samplers[0]
        snapshot = {name: layer.weight_A.clone() for name, layer in (first.lease.adapters or {}).items()}
        training = clients[0][0]
        tokens = [(5 * i) % 300 + 40 for i in range(24)]
        await (await training.forward_backward([make_datum(tokens, weights=[1.0] * 23)], "cross_entropy"))
        await (await training.optim_step(AdamParams(learning_rate=0.05)))
        alone = await _sample(first, 0)  # alone: the lease makes its model now
        assert pools[0] is not None and pools[0].copies_made == 1
        named = dict(first.lease.model.named_parameters())
        for name, weight_A in snapshot.items():
            lora_A = next(p for n, p in named.items() if n.startswith(f"base_model.model.{name}.lora_A"))
            assert torch.equal(lora_A, weight_A)
        for solo_sequence, joint_sequence in zip(alone.sequences, together[0].sequences, strict=True):
            assert solo_sequence.tokens == joint_sequence.tokens
        await backend.close()

    asyncio.run(main())
