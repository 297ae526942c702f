"""forward_backward + optim_step through `kitchen serve` (the real tinker SDK over HTTP on 127.0.0.1)
against the same local backend called in-process: milliseconds per step and their ratio.

Both sides train a LoRA (rank 8) of the same model on the same batch (8 sequences x 64 tokens)
with one torch thread; the server runs in its own process. Both stay up for the whole run and
take turns, `--rounds` blocks of `--steps` steps each, so a change in the machine's load (it
may be shared) lands on both sides alike; each round's ratio is its two medians', and the
spread of those ratios is printed with the load (`/proc/loadavg`) before and after.
Goal: ratio <= 1.15 at 32M.

    PYTHONPATH=. .venv/bin/python benchmarks/serve_overhead.py --model 32m --rounds 5 --steps 6
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks._models import model_name
from tests.serve.server_process import API_KEY, ServerProcess
from train_core.types import AdamParams, Datum, ModelInput, TensorData

ROWS, LENGTH, RANK = 8, 64, 8


def batch_tokens(vocab: int = 1400) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(10, vocab) for _ in range(LENGTH + 1)] for _ in range(ROWS)]


Step = Callable[[], None]


def in_process(model: str, store: Path, loop: asyncio.AbstractEventLoop) -> Step:
    """One forward_backward + optim_step on the local backend in this process, per call."""
    from adapters.local.backend import LocalBackend

    torch.set_num_threads(1)
    backend = LocalBackend(checkpoint_dir=store)
    client = loop.run_until_complete(backend.create_training_client(model, lora_rank=RANK))
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

    async def step() -> None:
        fb = await client.forward_backward(data, "cross_entropy")
        opt = await client.optim_step(AdamParams(learning_rate=1e-4))
        await fb
        await opt

    return lambda: loop.run_until_complete(step())


def served(model: str, store: Path) -> tuple[Step, ServerProcess]:
    """The same step through the real tinker SDK and `kitchen serve --backend local`, per call."""
    import tinker
    from tinker import types

    store.parent.mkdir(parents=True, exist_ok=True)
    models_file = store.parent / "models.yaml"
    models_file.write_text(f"bench: {model}\n")
    server = ServerProcess(store, backend="local", extra=["--models", str(models_file), "local.cpu_threads=1"]).start()
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

    def step() -> None:
        fb = training.forward_backward(data, "cross_entropy")
        opt = training.optim_step(types.AdamParams(learning_rate=1e-4))
        fb.result()
        opt.result()

    return step, server


def block(step: Step, steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=("tiny", "32m", "50m"), default="tiny")
    parser.add_argument("--rounds", type=int, default=5, help="alternating blocks per side")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per block")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        model = model_name(args.model, root)
        loop = asyncio.new_event_loop()
        local_step = in_process(model, root / "local", loop)
        serve_step, server = served(model, root / "serve" / "store")
        try:
            block(local_step, args.warmup)
            block(serve_step, args.warmup)
            print(f"load average before: {load()}")
            local_all: list[float] = []
            serve_all: list[float] = []
            ratios = []
            for _ in range(args.rounds):
                local_times, serve_times = block(local_step, args.steps), block(serve_step, args.steps)
                local_all += local_times
                serve_all += serve_times
                ratios.append(statistics.median(serve_times) / statistics.median(local_times))
            print(f"load average after:  {load()}")
        finally:
            server.stop()
            loop.close()
    local_ms, serve_ms = 1000 * statistics.median(local_all), 1000 * statistics.median(serve_all)
    print(f"model {args.model}: in-process {local_ms:.1f} ms/step, kitchen serve {serve_ms:.1f} ms/step (median)")
    print("per-round ratios: " + " ".join(f"{r:.3f}" for r in ratios))
    print(
        f"serve/in-process overhead ratio: {serve_ms / local_ms:.3f} "
        f"(rounds: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
