"""Peak memory of local training: the ~50M Qwen3 model in float32 vs bfloat16, with and without
gradient checkpointing.

    PYTHONPATH=. python benchmarks/memory.py [--batch 4] [--length 256] [--steps 2]

Each configuration runs in a fresh process (peak RSS is per process): it builds the local backend
with `dtype` and `gradient_checkpointing`, trains `--steps` steps of cross-entropy on random
tokens, and reports its peak RSS (`ru_maxrss`) and the peak minus the RSS after loading the model
(what training added). The last line gives the ratios against float32 without checkpointing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


def child(model: str, dtype: str, checkpointing: bool, batch: int, length: int, steps: int) -> None:
    import random

    import torch

    from adapters.local.backend import LocalBackend
    from adapters.local.training_client import TrainingOptions
    from train_core.types import AdamParams, Datum, ModelInput, TensorData

    torch.set_num_threads(1)
    rng = random.Random(0)
    data = []
    for _ in range(batch):
        tokens = [rng.randrange(1, 1500) for _ in range(length + 1)]
        data.append(
            Datum(
                ModelInput.from_ints(tokens[:-1]),
                {
                    "target_tokens": TensorData.from_list(tokens[1:], "int64"),
                    "weights": TensorData.from_list([1.0] * length, "float32"),
                },
            )
        )
    with tempfile.TemporaryDirectory() as tmp:
        backend = LocalBackend(
            Path(tmp), device="cpu", dtype=dtype, training=TrainingOptions(gradient_checkpointing=checkpointing)
        )

        async def run() -> int:
            client = await backend.create_training_client(model)
            loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            for _ in range(steps):
                await (await client.forward_backward(data, "cross_entropy"))
                await (await client.optim_step(AdamParams(1e-4)))
            return loaded

        loaded = asyncio.run(run())
        asyncio.run(backend.close())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_mib": peak / 1024, "added_mib": (peak - loaded) / 1024}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--child", nargs=3)
    args = parser.parse_args()
    if args.child:
        model, dtype, checkpointing = args.child
        child(model, dtype, checkpointing == "1", args.batch, args.length, args.steps)
        return
    from benchmarks._models import build_qwen3_50m

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = build_qwen3_50m(Path(tmp) / "qwen3-50m")
        for dtype in ("float32", "bfloat16"):
            for checkpointing in ("0", "1"):
                command = [sys.executable, __file__, "--child", model, dtype, checkpointing]
                command += ["--batch", str(args.batch), "--length", str(args.length), "--steps", str(args.steps)]
                out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
                result = json.loads(out.strip().splitlines()[-1])
                results[(dtype, checkpointing)] = result
                label = f"{dtype}{' + gradient checkpointing' if checkpointing == '1' else ''}"
                print(f"{label}: peak RSS {result['peak_mib']:.0f} MiB, training added {result['added_mib']:.0f} MiB")
    base = results[("float32", "0")]["peak_mib"]
    print(
        "ratio (peak RSS vs float32): "
        + ", ".join(f"{d}{'+gc' if c == '1' else ''} {r['peak_mib'] / base:.2f}" for (d, c), r in results.items())
    )


if __name__ == "__main__":
    main()
