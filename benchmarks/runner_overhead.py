"""What the runner costs per stage: µs per stage of a workflow of empty stages, minus the stages'
own cost (awaiting `run` directly).

    PYTHONPATH=. python benchmarks/runner_overhead.py [--steps 2000] [--stages 10] [--repeats 5] [--env-vars 300]
        [--profile]

Set up like a real run (`kitchen run`): events to an `events.jsonl`, metrics to a `metrics.jsonl`,
`time/<stage>` metrics, one step loop, no hooks and no OpenTelemetry SDK configured (the default).
The stages do nothing, so what is measured is the runner's bookkeeping (spans, events, timing,
context), the same on every backend. `--env-vars N` pads the environment to N variables (one in ten
named like a secret, `*_TOKEN`), as on a CI or cluster machine: redacting events must not cost
more there. Repeats alternate with the direct baseline; medians count, and the spread (min-max of
the overhead over the repeats) is printed. Times are the process's CPU time (`time.process_time`),
which a shared, loaded machine inflates far less than the wall clock; pin the process to one core
(`taskset -c 0`) to keep it on one cache. `--profile` prints cProfile's top functions of one
runner pass. The last line is the overhead in µs per stage (goal: <= 20).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

from kitchen.engine.context import Context
from kitchen.engine.observe.logging import make_run_logger
from kitchen.engine.runner import Runner
from kitchen.engine.runs.metrics import MetricsRecorder
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Loop, Workflow


class Nothing(Stage):
    async def run(self, ctx: Context) -> None:
        return None


class Cfg(BaseModel):
    pass


def runner_seconds(steps: int, stages: int, scratch: Path) -> float:
    body: list[Stage] = [Nothing(name=f"s{i}") for i in range(stages)]
    workflow = Workflow("overhead", steps=[Loop("train", over=lambda ctx: steps, step=True, body=list(body))])
    events = scratch / "events.jsonl"
    logger, sink = make_run_logger(events, recipe="overhead")
    ctx = Context(Cfg(), {}, run_dir=scratch, metrics=MetricsRecorder(scratch / "metrics.jsonl"), logger=logger)
    started = time.process_time()
    asyncio.run(Runner(workflow).run(ctx))
    seconds = time.process_time() - started
    sink.close()
    return seconds


def direct_seconds(steps: int, stages: int) -> float:
    body = [Nothing(name=f"s{i}") for i in range(stages)]
    ctx = Context(Cfg(), {})

    async def run() -> None:
        for _ in range(steps):
            for stage in body:
                await stage.run(ctx)

    started = time.process_time()
    asyncio.run(run())
    return time.process_time() - started


def pad_environment(size: int) -> int:
    """Add variables until the environment holds `size` (every tenth secret-named); its size."""
    index = 0
    while len(os.environ) < size:
        name = f"BENCH_SERVICE_{index}_TOKEN" if index % 10 == 0 else f"BENCH_VAR_{index}"
        os.environ[name] = f"value-{index:06d}-" + "x" * 24
        index += 1
    return len(os.environ)


def profile_runner(steps: int, stages: int, scratch: Path) -> None:
    """cProfile's top functions (by own time) of one runner pass."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(runner_seconds, steps, stages, scratch)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--stages", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--env-vars", type=int, default=0, help="pad the environment to this many variables")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions of one runner pass")
    args = parser.parse_args()
    env_size = pad_environment(args.env_vars)
    count = args.steps * args.stages
    runner_s, direct_s = [], []
    with tempfile.TemporaryDirectory() as tmp:
        if args.profile:
            profile_runner(args.steps, args.stages, Path(tmp))
        for repeat in range(args.repeats):
            scratch = Path(tmp) / str(repeat)
            scratch.mkdir()
            runner_s.append(runner_seconds(args.steps, args.stages, scratch))
            direct_s.append(direct_seconds(args.steps, args.stages))
    r, d = statistics.median(runner_s), statistics.median(direct_s)
    overheads = sorted((runner - direct) / count * 1e6 for runner, direct in zip(runner_s, direct_s, strict=True))
    overhead = (r - d) / count * 1e6
    print(
        f"{args.steps} steps x {args.stages} empty stages, {args.repeats} repeats, events file, {env_size} env vars, "
        f"load average {os.getloadavg()[0]:.1f}; process CPU time:"
    )
    print(f"runner {r / count * 1e6:.1f} µs/stage, direct await {d / count * 1e6:.2f} µs/stage")
    print(f"runner overhead: {overhead:.1f} µs per stage (repeats {overheads[0]:.1f}-{overheads[-1]:.1f}; goal <= 20)")


if __name__ == "__main__":
    main()
