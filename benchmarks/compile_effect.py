"""What `local.compile` (torch.compile of the model's body) does to a supervised step of the local backend.

    PYTHONPATH=. python benchmarks/compile_effect.py [--size 32m] [--warmup 4] [--steps 4] [--repeats 3]

Two training clients of the same model (same initial weights), one with `local.compile`, in one
process pinned to `--threads` cores, train on the same batches (`sft_vs_torch.py`'s: batch 4 of
random token lists of 24-64 tokens, cross-entropy on every target, `forward_backward` +
`optim_step`). First the warm-up steps, which for the compiled client include compiling (the first
batch shape, then the dynamic-shape graph the next shapes need): their wall-clock and process CPU
time are printed apart, as the compile cost (inductor's C++ compiles run in worker processes,
so that CPU time is only partly counted; the wall clock holds all of it). Inductor's cache is a
fresh directory, so nothing is reused from an earlier run. Then `--repeats` blocks of `--steps`
steady-state steps, the two clients alternating block by block: the last line is the median
(min, max) over the blocks of the compiled client's CPU time per step over the eager client's.
No goal: the figure is measured, not assumed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

Timing = tuple[float, float]
"""(wall clock, process CPU time) of some steps."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="32m", help="tiny, 32m or 50m")
    parser.add_argument("--warmup", type=int, default=4, help="steps before timing (the compiled client compiles)")
    parser.add_argument("--steps", type=int, default=4, help="steps per timed block")
    parser.add_argument("--repeats", type=int, default=3, help="timed blocks per client, alternating")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.threads])
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tmp) / "inductor")  # a cold compile
        asyncio.run(measure(args, Path(tmp)))


async def measure(args: argparse.Namespace, scratch: Path) -> None:
    import torch

    from adapters.local.backend import LocalBackend
    from adapters.local.training_client import TrainingOptions
    from benchmarks._models import model_name
    from benchmarks.sft_vs_torch import LR, make_batches, to_datums
    from train_core.types import AdamParams, Datum

    torch.set_num_threads(args.threads)
    name = model_name(args.size, scratch)
    batches = [to_datums(b) for b in make_batches(args.warmup + args.steps * args.repeats, 4)]
    warmup, timed = batches[: args.warmup], batches[args.warmup :]
    backends = {
        label: LocalBackend(checkpoint_dir=scratch / label, device="cpu", training=TrainingOptions(compile=compiled))
        for label, compiled in (("eager", False), ("compiled", True))
    }
    clients = {label: await backend.create_training_client(name) for label, backend in backends.items()}

    async def steps(label: str, data: list[list[Datum]], report: bool = False) -> Timing:
        started, cpu_started = time.perf_counter(), time.process_time()
        for index, batch in enumerate(data):
            fb = await clients[label].forward_backward(batch, "cross_entropy")
            optim = await clients[label].optim_step(AdamParams(learning_rate=LR))
            (await fb).metrics["loss:sum"]
            await optim
            if report:  # a compile can take many minutes on a loaded machine: say how far it got
                print(
                    f"{label} warm-up step {index + 1}: {time.perf_counter() - started:.1f} s wall, "
                    f"{time.process_time() - cpu_started:.1f} s CPU so far",
                    flush=True,
                )
        return time.perf_counter() - started, time.process_time() - cpu_started

    try:
        first = {label: await steps(label, warmup, report=True) for label in clients}
        blocks: dict[str, list[Timing]] = {label: [] for label in clients}
        for repeat in range(args.repeats):
            block = timed[repeat * args.steps : (repeat + 1) * args.steps]
            for label in clients if repeat % 2 == 0 else reversed(list(clients)):
                blocks[label].append(await steps(label, block))
    finally:
        for backend in backends.values():
            await backend.close()
    per_step = {label: [(w / args.steps, c / args.steps) for w, c in timings] for label, timings in blocks.items()}
    print(f"{args.size}, batch 4, {args.threads} thread(s), load average {os.getloadavg()[0]:.1f}")
    for label in clients:
        wall, cpu = first[label]
        steady = per_step[label]
        print(
            f"{label:>8}: first {args.warmup} steps {wall:.1f} s wall / {cpu:.1f} s CPU; steady state "
            f"{1e3 * statistics.median(w for w, _ in steady):.0f} ms wall / "
            f"{1e3 * statistics.median(c for _, c in steady):.0f} ms CPU per step (blocks: "
            + ", ".join(f"{1e3 * c:.0f}" for _, c in steady)
            + " ms CPU)"
        )
    compile_wall = first["compiled"][0] - args.warmup * statistics.median(w for w, _ in per_step["compiled"])
    print(f"compile time (the compiled client's warm-up beyond its steady steps): {compile_wall:.1f} s wall")
    ratios = [c / e for (_, c), (_, e) in zip(per_step["compiled"], per_step["eager"], strict=True)]
    print(
        f"ratio compiled/eager CPU time per step: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, "
        f"max {max(ratios):.3f} over {len(ratios)} alternating blocks (no goal; < 1 is faster)"
    )


if __name__ == "__main__":
    main()
