"""Steps/s of local training on 1 worker (in process) vs 2 FSDP2 workers (Ray actors, gloo on the
cpu, NCCL on GPUs), on the tiny model and on a ~50M random Qwen3-architecture model.

A step is one cross_entropy `forward_backward` on a fixed batch plus one AdamW `optim_step`,
awaited; a few warm-up steps are not timed (worker start-up is never timed). Each worker uses one
torch thread, as does the single-process run. The last line is the ratio (2 workers / 1 worker)
of steps/s on the 50M model.

    PYTHONPATH=. .venv/bin/python benchmarks/distributed_scaling.py [--steps 10] [--sizes tiny,50m]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

import torch

from adapters.local.backend import LocalBackend
from adapters.local.distributed import DistributedOptions, ensure_ray
from benchmarks._models import model_name
from kitchen.testing.contract.data import sft_datum
from train_core.types import AdamParams, Datum


def make_batch(backend: LocalBackend, base: str, rows: int, length: int) -> list[Datum]:
    vocab = 1500  # the tiny tokenizer (both models use it)
    rng = random.Random(0)
    return [sft_datum([rng.randrange(3, vocab - 1) for _ in range(length + 1)]) for _ in range(rows)]


async def steps_per_second(backend: LocalBackend, base: str, data: list[Datum], steps: int, warmup: int) -> float:
    client = await backend.create_training_client(base)
    adam = AdamParams(learning_rate=1e-4)
    for index in range(warmup + steps):
        if index == warmup:
            start = time.perf_counter()
        await (await client.forward_backward(data, "cross_entropy"))
        await (await client.optim_step(adam))
    elapsed = time.perf_counter() - start
    await backend.close()
    return steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--sizes", default="tiny,50m")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ensure_ray(None)
    print(f"torch {torch.__version__}, cuda: {torch.cuda.is_available()}, {args.rows} x {args.length} tokens/step")
    ratio = 0.0
    with tempfile.TemporaryDirectory() as scratch:
        for size in args.sizes.split(","):
            base = model_name(size, Path(scratch))
            rates = {}
            for workers in (1, 2):
                options = DistributedOptions(workers, None, 600.0, 1) if workers > 1 else None
                backend = LocalBackend(Path(scratch) / f"ckpt-{size}-{workers}", distributed=options)
                data = make_batch(backend, base, args.rows, args.length)
                rates[workers] = asyncio.run(steps_per_second(backend, base, data, args.steps, args.warmup))
                print(
                    f"{size}: {workers} worker(s): {rates[workers]:.2f} steps/s ({1000 / rates[workers]:.0f} ms/step)"
                )
            ratio = rates[2] / rates[1]
            print(f"{size}: 2 workers / 1 worker = {ratio:.2f}")
    print(f"ratio (2 workers / 1 worker, last model): {ratio:.2f}")


if __name__ == "__main__":
    main()
