"""Weight sync into the vLLM engine (`local.sampler: vllm`) on the CPU, and how far the engine's
logprobs are from the trainer's right after each sync.

    .venv-vllm/bin/python benchmarks/vllm_weight_sync.py [--size tiny32] [--dtypes float32,bfloat16]
        [--steps 3] [--lr 1e-3] [--repeats 5] [--threads 1]

Needs vLLM (`bash scripts/setup_vllm.sh` makes .venv-vllm); without it, it says so and exits.
Per dtype (trainer and engine alike): one training client, then `--steps` rounds of an SFT step
at `--lr` on random tokens followed by `save_weights_and_get_sampling_client`. Printed per round:
the sync's seconds (`weight_sync_s`, RL's `time/weight_sync`: the copy into shared memory on the
training thread plus the engine's in-place reload), and the new client's samples (4 prompts x 8
samples x 16 tokens, temperature 1) scored by the trainer: `kl_sample_train_v1`/`v2` and the
largest per-token |logprob difference|. Then the transport alone, in this process, on the same
weights (medians of `--repeats`): the copy into a shared-memory segment against the file round
trip the engine used before (safetensors written to, then read back from, a file in the temporary
directory, as it was in the run directory: on a disk, though it may stay in the page cache);
their ratio is the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from adapters.local.backend import LocalBackend
from adapters.local.model_loading import load_base_model
from adapters.local.vllm_sampling_client import VllmSamplingClient
from adapters.local.vllm_settings import VllmSettings
from adapters.local.vllm_weights import WeightBuffers
from benchmarks._models import model_name
from kitchen.engine.ports import TrainingClient
from tests.adapters.vllm_engine.engine_checks import sample_and_compare
from train_core.types import AdamParams, Datum, ModelInput, TensorData

DRAWN_IDS = 1000
"""Training tokens are drawn below this id (the tiny tokenizer, which every size here uses, has 1500)."""

PROMPTS = ("What is 23 + 45?", "Alice reads a red book.", "The quick dog finds the old garden and", "Once upon")


def random_batch(rows: int, length: int, generator: torch.Generator) -> list[Datum]:
    """Next-token prediction on random token rows: a step that moves every weight it reaches."""
    data = []
    for _ in range(rows):
        tokens = torch.randint(3, DRAWN_IDS, (length + 1,), generator=generator).tolist()
        inputs = {
            "target_tokens": TensorData.from_list(tokens[1:], "int64"),
            "weights": TensorData.from_list([1.0] * length, "float32"),
        }
        data.append(Datum(ModelInput.from_ints(tokens[:-1]), inputs))
    return data


async def sync_rounds(training: TrainingClient, steps: int, lr: float) -> list[dict[str, float]]:
    """Each round: one step, a new sampling client (the sync), and the mismatch of its samples."""
    tokenizer = training.get_tokenizer()
    prompts = [ModelInput.from_ints(tokenizer.encode(text, add_special_tokens=False)) for text in PROMPTS]
    generator = torch.Generator().manual_seed(0)
    rounds = []
    for _ in range(steps):
        batch = random_batch(8, 64, generator)
        await (await training.forward_backward(batch, "cross_entropy"))
        await (await training.optim_step(AdamParams(learning_rate=lr)))
        sampler = await training.save_weights_and_get_sampling_client()
        assert isinstance(sampler, VllmSamplingClient) and sampler.weight_sync_s is not None
        mismatch = await sample_and_compare(sampler, training, prompts, 8, 16)
        rounds.append({"sync_s": sampler.weight_sync_s, **mismatch})
    return rounds


def engine_rounds(name: str, dtype: str, steps: int, lr: float, scratch: Path) -> list[dict[str, float]]:
    backend = LocalBackend(scratch / dtype / "checkpoints", device="cpu", dtype=dtype, vllm=VllmSettings())

    async def run() -> list[dict[str, float]]:
        training = await backend.create_training_client(name)
        await training.save_weights_and_get_sampling_client()  # starts the engine: not part of a sync
        return await sync_rounds(training, steps, lr)

    try:
        return asyncio.run(run())
    finally:
        asyncio.run(backend.close())


def transport_seconds(named: Sequence[tuple[str, torch.Tensor]], repeats: int, scratch: Path) -> tuple[float, float]:
    """Medians: the copy into a (reused) shared-memory segment, and a safetensors file's write + read."""
    buffers = WeightBuffers(named[0][1].dtype)
    shared, files = [], []
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            buffer = buffers.take(named)
            shared.append(time.perf_counter() - start)
            buffers.give_back(buffer)
            file = scratch / "weights.safetensors"
            start = time.perf_counter()
            save_file({name: t.detach().contiguous() for name, t in named}, file)
            load_file(file)
            files.append(time.perf_counter() - start)
            file.unlink()
    finally:
        buffers.close()
    return statistics.median(shared), statistics.median(files)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="tiny32", help="tiny32, 32m or 50m (head sizes vLLM's CPU kernels take)")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="the trainer's torch threads (local.cpu_threads)")
    args = parser.parse_args()
    if importlib.util.find_spec("vllm") is None:
        print("vLLM is not installed here: run it with .venv-vllm/bin/python (bash scripts/setup_vllm.sh makes it)")
        return
    torch.set_num_threads(args.threads)  # the engine runs as many (local.vllm.cpu_threads' default)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:  # on a disk (not /dev/shm), as a run directory is
        scratch = Path(tmp)
        name = model_name(args.size, scratch)
        results = {dtype: engine_rounds(name, dtype, args.steps, args.lr, scratch) for dtype in args.dtypes.split(",")}
        named = list(load_base_model(name, torch.float32).named_parameters())
        shm_s, file_s = transport_seconds(named, args.repeats, scratch)
    size_mb = sum(t.numel() * t.element_size() for _, t in named) / 1e6
    print(
        f"{args.size} ({size_mb:.1f} MB in float32), {args.steps} steps at lr {args.lr}, {args.threads} torch "
        f"thread(s); machine: "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average {load_before:.1f} at "
        f"the start, {os.getloadavg()[0]:.1f} at the end"
    )
    for dtype, rounds in results.items():
        for step, r in enumerate(rounds, 1):
            print(
                f"  {dtype:<9} step {step}: sync {r['sync_s'] * 1e3:7.1f} ms; sampler vs trainer: "
                f"kl_sample_train_v1 {r['optim/kl_sample_train_v1']:+.2e}, v2 {r['optim/kl_sample_train_v2']:.2e}, "
                f"max |logprob diff| {r['max_abs_diff']:.2e}"
            )
    print(
        f"transport alone, float32, median of {args.repeats}: shared memory {shm_s * 1e3:.1f} ms "
        f"({size_mb / 1e3 / shm_s:.2f} GB/s), safetensors file write + read {file_s * 1e3:.1f} ms"
    )
    print(f"file / shared memory: {file_s / shm_s:.2f}x")


if __name__ == "__main__":
    main()
