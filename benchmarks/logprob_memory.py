"""Peak memory of one training step's logprobs: chunked from the final hidden states against the
whole [tokens, vocab] logits, on a model with Qwen's 151,936-token vocabulary.

    PYTHONPATH=. python benchmarks/logprob_memory.py [--batch 4] [--length 1024] [--device cpu|cuda]
        [--model big-vocab|0.6b] [--dtype float32|bfloat16]

Each method (`local.logprob_method` chunked, then full) runs in a fresh process: the local backend
loads the model, then one `forward_backward` of cross-entropy on `--batch` x `--length` random
tokens (no optimizer step: the optimizer's memory is the same for both). On the CPU the figure is
the process's peak RSS minus its RSS once the model is loaded (`ru_maxrss`: what the step added);
on CUDA, `torch.cuda.max_memory_allocated` over the step, minus what was allocated before it.
The default model is a 2-layer, 256-wide Qwen3 under the 151,936-token vocabulary (the logits set
its memory); on CUDA the defaults are the 0.6B model in bfloat16 at 8 x 4096 tokens. The last line
is the ratio full / chunked (goal: >= 3 at 4 x 1024 tokens).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


def child(model: str, method: str, device: str, dtype: str, batch: int, length: int) -> None:
    import random

    import torch

    from adapters.local.backend import LocalBackend
    from adapters.local.training_client import TrainingOptions
    from train_core.types import Datum, ModelInput, TensorData

    torch.set_num_threads(1)
    rng = random.Random(0)
    data = []
    for _ in range(batch):
        tokens = [rng.randrange(1, 151_000) for _ in range(length + 1)]
        inputs = {
            "target_tokens": TensorData.from_list(tokens[1:], "int64"),
            "weights": TensorData.from_list([1.0] * length, "float32"),
        }
        data.append(Datum(ModelInput.from_ints(tokens[:-1]), inputs))
    cuda = device == "cuda"
    with tempfile.TemporaryDirectory() as tmp:
        options = TrainingOptions(logprob_method=method)  # type: ignore[arg-type]
        backend = LocalBackend(Path(tmp), device=device, dtype=dtype, training=options)

        async def run() -> float:
            client = await backend.create_training_client(model)
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            else:
                before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            try:
                await (await client.forward_backward(data, "cross_entropy"))
            except torch.OutOfMemoryError:
                return float("inf")
            if cuda:
                return (torch.cuda.max_memory_allocated() - before) / 2**20
            return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before) / 2**20

        added = asyncio.run(run())
        asyncio.run(backend.close())
    print(json.dumps({"added_mib": added}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--batch", type=int, help="default 4 (cpu) or 8 (cuda)")
    parser.add_argument("--length", type=int, help="default 1024 (cpu) or 4096 (cuda)")
    parser.add_argument("--model", choices=("big-vocab", "0.6b"), help="default big-vocab (cpu) or 0.6b (cuda)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), help="default float32 (cpu) or bfloat16 (cuda)")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "METHOD"))
    args = parser.parse_args()
    cuda = args.device == "cuda"
    batch, length = args.batch or (8 if cuda else 4), args.length or (4096 if cuda else 1024)
    dtype = args.dtype or ("bfloat16" if cuda else "float32")
    if args.child:
        child(args.child[0], args.child[1], args.device, dtype, batch, length)
        return
    import torch

    from benchmarks._models import model_name

    if cuda and not torch.cuda.is_available():
        print("logprob_memory --device cuda needs a CUDA GPU; none here (nothing measured)")
        return
    card = torch.cuda.get_device_name() if cuda else f"cpu ({os.cpu_count()} cores)"
    added = {}
    with tempfile.TemporaryDirectory() as tmp:
        size = args.model or ("0.6b" if cuda else "big-vocab")
        model = model_name(size, Path(tmp))
        for method in ("chunked", "full"):
            command = [sys.executable, __file__, "--child", model, method, "--device", args.device]
            command += ["--batch", str(batch), "--length", str(length), "--dtype", dtype]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            added[method] = json.loads(out.strip().splitlines()[-1])["added_mib"]
            what = "out of memory" if added[method] == float("inf") else f"{added[method]:.0f} MiB"
            print(f"{card}, {size} {dtype}, {batch} x {length} tokens, {method}: the step added {what}")
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"ratio (full / chunked peak memory of the step): {added['full'] / added['chunked']:.2f} (goal: >= 3)")


if __name__ == "__main__":
    main()
