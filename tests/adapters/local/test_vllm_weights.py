"""Full weights in shared memory for the vLLM engine (`adapters.local.vllm_weights`), without vLLM:
what the engine's side reads is what the trainer wrote, in the engine's dtype, a tied head once;
segments are reused when no client holds them and unlinked at the end; and a training client given
a rollout engine that sleeps puts it to sleep before each pass and makes no sampler copy."""

from __future__ import annotations

import asyncio
import pickle
import random
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from adapters.common.tokenizer import load_tokenizer
from adapters.local.checkpoint_io import ModelIdentity
from adapters.local.model_loading import load_base_model
from adapters.local.serial_executor import SerialExecutor
from adapters.local.training_client import LocalTrainingClient
from adapters.local.vllm_protocol import ShippedWeights
from adapters.local.vllm_weights import SHM_DIR, WeightBuffers, layout, load_shared, ship
from train_core.types import Datum, ModelInput, TensorData

pytestmark = pytest.mark.skipif(not SHM_DIR.is_dir(), reason="POSIX shared memory lives in /dev/shm on Linux")


def _read(shared: Any) -> dict[str, torch.Tensor]:
    """What the engine's process loads: each tensor, copied out of the mapped segment."""
    loaded: dict[str, torch.Tensor] = {}
    load_shared(shared, lambda tensors: loaded.update((name, t.clone()) for name, t in tensors))
    return loaded


def test_the_engine_reads_the_weights_written_in_its_dtype_and_a_tied_head_once() -> None:
    model = load_base_model("tiny", torch.float32)
    named = list(model.named_parameters())
    config: Any = model.config
    assert config.tie_word_embeddings and "lm_head.weight" not in dict(named)
    buffers = WeightBuffers(torch.bfloat16)
    buffer = buffers.take(named)
    try:
        slots = buffer.shared.slots
        assert all(slot.offset % 64 == 0 for slot in slots)
        assert [s.name for s in slots] == [name for name, _ in named]
        loaded = _read(buffer.shared)
        assert loaded.keys() == dict(named).keys()
        for name, param in named:
            assert loaded[name].dtype == torch.bfloat16
            assert torch.equal(loaded[name], param.detach().to(torch.bfloat16))
        with torch.no_grad():
            named[0][1].add_(1.0)
        assert torch.equal(_read(buffer.shared)[named[0][0]], loaded[named[0][0]])  # a snapshot: unchanged
        assert (SHM_DIR / buffer.shared.segment.lstrip("/")).exists()
    finally:
        buffers.close()
    assert not (SHM_DIR / buffer.shared.segment.lstrip("/")).exists()


def test_shipped_weights_survive_pickling_out_of_band_and_load_as_the_segment_does() -> None:
    """What Ray does with the weights of an engine on another node: pickle them with out-of-band
    buffers (protocol 5) into its object store, and unpickle them there as a read-only array."""
    model = load_base_model("tiny", torch.float32)
    named = list(model.named_parameters())
    buffers = WeightBuffers(torch.float32)
    buffer = buffers.take(named)
    try:
        carried: list[pickle.PickleBuffer] = []
        data = ship(buffer.shared, lambda shipped: pickle.dumps(shipped, protocol=5, buffer_callback=carried.append))
        assert len(carried) == 1 and carried[0].raw().nbytes == buffer.shared.size  # out of band, not in the pickle
        arrived = pickle.loads(data, buffers=[bytes(carried[0].raw())])  # read-only on arrival, as Ray's
        assert isinstance(arrived, ShippedWeights) and arrived.size == buffer.shared.size
        loaded = _read(arrived)
        assert loaded.keys() == dict(named).keys()
        assert all(torch.equal(loaded[name], param.detach()) for name, param in named)
    finally:
        buffers.close()


def test_segments_are_reused_once_free_and_one_spare_is_kept() -> None:
    named = [("a", torch.arange(5.0)), ("b", torch.ones(3, 2))]
    buffers = WeightBuffers(torch.float32)
    try:
        first = buffers.take(named)
        second = buffers.take([(n, t * 2) for n, t in named])  # the first still held: a new segment
        assert buffers.made == 2 and first.shared.segment != second.shared.segment
        assert torch.equal(_read(first.shared)["b"], torch.ones(3, 2))
        assert torch.equal(_read(second.shared)["b"], 2 * torch.ones(3, 2))
        buffers.give_back(first)
        third = buffers.take([(n, t * 3) for n, t in named])
        assert buffers.made == 2 and third is first  # the spare, rewritten
        assert torch.equal(_read(third.shared)["a"], 3 * torch.arange(5.0))
        buffers.give_back(second)
        buffers.give_back(third)  # one spare kept, the other unlinked
        assert buffers.in_use == 0
        gone = [b for b in (second, third) if not (SHM_DIR / b.shared.segment.lstrip("/")).exists()]
        assert len(gone) == 1
        other = buffers.take([("c", torch.zeros(7))])  # another layout: a new segment
        assert buffers.made == 3 and _read(other.shared)["c"].shape == (7,)
    finally:
        buffers.close()
    assert layout(named, torch.float32)[1] == 128  # 5 and 6 floats, each rounded up to 64 bytes


def test_a_training_client_with_a_sleeping_engine_puts_it_to_sleep_before_each_pass(tmp_path: Path) -> None:
    """The hook runs on the training thread before every pass that computes (forward,
    forward_backward, a custom loss); the trainer keeps no sampler copies for another engine, which
    reads the trained model itself in a job on the training thread."""
    model = load_base_model("tiny", torch.float32)
    slept: list[str] = []
    read: list[tuple[str, bool]] = []

    async def make_sampler(given: Any, identity: Any, tokenizer: Any, seed: int, on_trainer: Any) -> Any:
        def capture() -> None:
            read.append((threading.current_thread().name, given is model))

        return await on_trainer(capture)

    def custom_loss(data: Any, logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        return -torch.stack([lp.sum() for lp in logprobs_D]).sum(), {}

    async def scenario() -> LocalTrainingClient:
        client = LocalTrainingClient(
            model,
            load_tokenizer("tiny"),
            ModelIdentity("tiny", None, 0),
            tmp_path,
            SerialExecutor("sampling"),
            random.Random(0),
            make_sampler=make_sampler,
            before_compute=lambda: slept.append(threading.current_thread().name),
        )
        inputs = {
            "target_tokens": TensorData.from_list([2, 3, 4], "int64"),
            "weights": TensorData.from_list([1.0, 1.0, 1.0], "float32"),
        }
        datum = Datum(ModelInput.from_ints([1, 2, 3]), inputs)
        await (await client.forward([datum], "cross_entropy"))
        await (await client.forward_backward([datum], "cross_entropy"))
        await (await client.forward_backward_custom([datum], custom_loss))
        await client.save_weights_and_get_sampling_client()
        await client.close()
        return client

    client = asyncio.run(scenario())
    assert len(slept) == 3 and all(name.startswith("local-training") for name in slept)
    assert len(read) == 1 and read[0][0].startswith("local-training") and read[0][1]
    assert client._samplers is None
