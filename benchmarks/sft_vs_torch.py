"""Supervised training speed: kitchen's local backend against a hand-written torch loop.

    PYTHONPATH=. python benchmarks/sft_vs_torch.py [--sizes tiny,32m,50m] [--steps 6] [--repeats 3]
        [--threads 1] [--compile]

Both train the same model (the same initial weights: the embedded tiny model, or a ~32M- or
~50M-parameter random Qwen3-architecture model built here) on the same batches (random token lists of varied
length, weight 1 on every target) with the same optimizer (AdamW, torch's fused kernel, betas
0.9/0.95, no clipping), float32 on the CPU with the same number of torch threads. The torch loop
pads each batch itself (its collate), runs forward, `log_softmax` + gather, the weighted sum,
backward and the optimizer step, and reads the loss. Kitchen runs `forward_backward` +
`optim_step` through its client API (datum checks, padding, its worker thread, TensorData
outputs) and awaits both. Warm-up steps are not timed. The two alternate `--repeats` times and
the median seconds per step of each count (a shared machine is noisy), both wall clock and process
CPU time (every thread's: the steadier figure on a loaded machine); the process is pinned to
`--threads` cores. `--compile` adds kitchen with `local.compile` (its warm-up is three times as long:
the first steps compile). The last line is the ratio kitchen / torch time per step (goal: <= 1.0).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from adapters.local.backend import LocalBackend
from adapters.local.model_loading import load_base_model
from adapters.local.training_client import TrainingOptions
from benchmarks._models import model_name
from train_core.types import AdamParams, Datum, ModelInput, TensorData

LR = 1e-4


def make_batches(steps: int, batch_size: int, seed: int = 0) -> list[list[list[int]]]:
    rng = random.Random(seed)
    return [
        [[rng.randrange(1, 1500) for _ in range(rng.randint(24, 64))] for _ in range(batch_size)] for _ in range(steps)
    ]


def to_datums(batch: list[list[int]]) -> list[Datum]:
    return [
        Datum(
            ModelInput.from_ints(tokens[:-1]),
            {
                "target_tokens": TensorData.from_list(tokens[1:], "int64"),
                "weights": TensorData.from_list([1.0] * (len(tokens) - 1), "float32"),
            },
        )
        for tokens in batch
    ]


Timing = tuple[float, float]
"""Seconds per timed step: (wall clock, process CPU time: every thread's, so kitchen's worker too)."""


def torch_loop(name: str, batches: list[list[list[int]]], warmup: int) -> Timing:
    model = load_base_model(name, torch.float32)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, fused=True)
    started = cpu_started = 0.0
    for step, batch in enumerate(batches):
        if step == warmup:
            started, cpu_started = time.perf_counter(), time.process_time()
        width = max(len(t) for t in batch) - 1
        inputs = torch.zeros((len(batch), width), dtype=torch.long)
        targets = torch.zeros((len(batch), width), dtype=torch.long)
        weights = torch.zeros((len(batch), width))
        for row, tokens in enumerate(batch):
            n = len(tokens) - 1
            inputs[row, :n] = torch.tensor(tokens[:-1])
            targets[row, :n] = torch.tensor(tokens[1:])
            weights[row, :n] = 1.0
        logits = model(input_ids=inputs, use_cache=False).logits
        logprobs = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        loss = -(logprobs * weights).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        float(loss.detach())
    steps = len(batches) - warmup
    return (time.perf_counter() - started) / steps, (time.process_time() - cpu_started) / steps


def kitchen_loop(
    name: str, batches: list[list[list[int]]], warmup: int, scratch: Path, compile_model: bool = False
) -> Timing:
    data = [to_datums(batch) for batch in batches]
    options = TrainingOptions(compile=compile_model)
    backend = LocalBackend(checkpoint_dir=scratch / "ckpt", device="cpu", training=options)

    async def run() -> Timing:
        client = await backend.create_training_client(name)
        started = cpu_started = 0.0
        for step, batch in enumerate(data):
            if step == warmup:
                started, cpu_started = time.perf_counter(), time.process_time()
            fb = await client.forward_backward(batch, "cross_entropy")
            optim = await client.optim_step(AdamParams(learning_rate=LR))
            (await fb).metrics["loss:sum"]
            await optim
        steps = len(data) - warmup
        return (time.perf_counter() - started) / steps, (time.process_time() - cpu_started) / steps

    try:
        return asyncio.run(run())
    finally:
        asyncio.run(backend.close())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="tiny,32m")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per run (after --warmup)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="also run kitchen with local.compile (torch.compile)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.threads])
    contenders = ["torch", "kitchen", *(["kitchen+compile"] if args.compile else [])]
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for size in args.sizes.split(","):
            name = model_name(size, scratch)
            batch_size, steps = (16, args.steps * 5) if size == "tiny" else (4, args.steps)
            batches = make_batches(steps + args.warmup, batch_size)
            # the compiled run warms up longer: its first steps compile each new batch shape
            runs: dict[str, list[Timing]] = {contender: [] for contender in contenders}
            for _ in range(args.repeats):  # alternate, so drifting machine load hits all alike
                runs["torch"].append(torch_loop(name, batches, args.warmup))
                runs["kitchen"].append(kitchen_loop(name, batches, args.warmup, scratch))
                if args.compile:
                    compiled = make_batches(steps + 3 * args.warmup, batch_size)
                    runs["kitchen+compile"].append(kitchen_loop(name, compiled, 3 * args.warmup, scratch, True))
            wall = {c: statistics.median(t[0] for t in runs[c]) for c in contenders}
            cpu = {c: statistics.median(t[1] for t in runs[c]) for c in contenders}
            print(
                f"{size}: batch {batch_size}, {steps} timed steps x {args.repeats} repeats, {args.threads} thread(s), "
                f"load average {os.getloadavg()[0]:.1f}; ms/step (wall / cpu): "
                + ", ".join(f"{c} {wall[c] * 1e3:.1f} / {cpu[c] * 1e3:.1f}" for c in contenders)
            )
            for contender in contenders[1:]:
                summary.append(
                    f"{size} {contender}/torch time per step: wall {wall[contender] / wall['torch']:.3f}, "
                    f"cpu {cpu[contender] / cpu['torch']:.3f}"
                )
    print("ratio (goal: <= 1.0): " + "; ".join(summary))


if __name__ == "__main__":
    main()
