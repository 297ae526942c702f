"""forward_backward + optim_step through `kitchen serve` (the real tinker SDK over HTTP on 127.0.0.1)
against the same local backend called in-process: milliseconds per step and their ratio.

Both sides train a LoRA (rank 8) of the same model on the same batch (8 sequences x 64 tokens)
with one torch thread; the server runs in its own process. Goal: ratio <= 1.15 at 32M.

    PYTHONPATH=. .venv/bin/python benchmarks/serve_overhead.py --model 32m --steps 20
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

import torch

from benchmarks._models import model_name
from tests.serve.server_process import API_KEY, ServerProcess
from train_core.types import AdamParams, Datum, ModelInput, TensorData

ROWS, LENGTH, RANK = 8, 64, 8


def batch_tokens(vocab: int = 1400) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(10, vocab) for _ in range(LENGTH + 1)] for _ in range(ROWS)]


def in_process(model: str, steps: int, warmup: int, store: Path) -> float:
    from adapters.local.backend import LocalBackend

    torch.set_num_threads(1)

    async def main() -> float:
        backend = LocalBackend(checkpoint_dir=store)
        client = await backend.create_training_client(model, lora_rank=RANK)
        data = [
            Datum(
                ModelInput.from_ints(t[:-1]),
                {
                    "target_tokens": TensorData.from_list(t[1:], "int64"),
                    "weights": TensorData.from_list([1.0] * LENGTH, "float32"),
                },
            )
            for t in batch_tokens()
        ]
        times = []
        for step in range(warmup + steps):
            start = time.perf_counter()
            fb = await client.forward_backward(data, "cross_entropy")
            opt = await client.optim_step(AdamParams(learning_rate=1e-4))
            await fb
            await opt
            if step >= warmup:
                times.append(time.perf_counter() - start)
        await backend.close()
        return sorted(times)[len(times) // 2]

    return asyncio.run(main())


def served(model: str, steps: int, warmup: int, store: Path) -> float:
    import tinker
    from tinker import types

    store.parent.mkdir(parents=True, exist_ok=True)
    models_file = store.parent / "models.yaml"
    models_file.write_text(f"bench: {model}\n")
    server = ServerProcess(store, backend="local", extra=["--models", str(models_file), "local.cpu_threads=1"]).start()
    try:
        client = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
        training = client.create_lora_training_client("bench", rank=RANK).result()
        data = [
            types.Datum(
                model_input=types.ModelInput.from_ints(t[:-1]),
                loss_fn_inputs={
                    "target_tokens": types.TensorData(data=t[1:], dtype="int64", shape=[LENGTH]),
                    "weights": types.TensorData(data=[1.0] * LENGTH, dtype="float32", shape=[LENGTH]),
                },
            )
            for t in batch_tokens()
        ]
        times = []
        for step in range(warmup + steps):
            start = time.perf_counter()
            fb = training.forward_backward(data, "cross_entropy")
            opt = training.optim_step(types.AdamParams(learning_rate=1e-4))
            fb.result()
            opt.result()
            if step >= warmup:
                times.append(time.perf_counter() - start)
        client.close("success").result()
        return sorted(times)[len(times) // 2]
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=("tiny", "32m", "50m"), default="tiny")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        model = model_name(args.model, root)
        local_ms = 1000 * in_process(model, args.steps, args.warmup, root / "local")
        serve_ms = 1000 * served(model, args.steps, args.warmup, root / "serve" / "store")
    print(f"model {args.model}: in-process {local_ms:.1f} ms/step, kitchen serve {serve_ms:.1f} ms/step (median)")
    print(f"serve/in-process overhead ratio: {serve_ms / local_ms:.3f}")


if __name__ == "__main__":
    main()
