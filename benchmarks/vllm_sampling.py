"""Sampling throughput of the rollout engines on the CPU: vLLM (`local.sampler: vllm`) against
kitchen's own sampler and Hugging Face `generate`, on the ~50M-parameter model.

    .venv-vllm/bin/python benchmarks/vllm_sampling.py [--size 50m] [--workloads 16x4x64,16x8x128]
        [--engines 1,2:200] [--threads 1] [--repeats 2] [--no-hf]

Needs vLLM (`bash scripts/setup_vllm.sh` makes .venv-vllm); without it, it says so and exits.
A workload PxSxT is P prompts (random token lists of varied length), each asked for S samples in
one `sample` call (as RL asks for a group), T tokens each, temperature 1, float32: 16x8x128 is
RL-shaped. Kitchen and HF (the prompts repeated S times, one left-padded `generate`) run in this
process on `--threads` torch threads. vLLM runs in its engine process, started once per engine
configuration and warmed up, and is timed from here. An engine configuration is THREADS or
THREADS:BLOCKTIME: the engine's torch threads (`local.vllm.cpu_threads`) and how long, in ms, its
idle OpenMP threads spin (KMP_BLOCKTIME; kitchen sets 1, Intel's default is 200). `2:200` is how
the engine ran before kitchen set either (torch's default of one thread per core, 2 here).

Each side is timed by the wall clock and by cpu time: for vLLM the engine process's and this
one's together, so "tokens per cpu-second" compares the work done, whatever the machine's load.
Medians of `--repeats`. Every configuration's ratio to kitchen's sampler is printed. Goal: vLLM
>= 1.3x kitchen's sampler per cpu-second on the 50M model.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import platform
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from adapters.local.backend import LocalBackend
from adapters.local.vllm_settings import VllmSettings
from benchmarks._models import model_name
from benchmarks.sampling_vs_hf import Timer, hf_generate, make_prompts
from kitchen.engine.ports import SamplingClient
from train_core.types import ModelInput, SamplingParams


@dataclass(frozen=True)
class Workload:
    prompts: int
    samples: int
    max_tokens: int

    @classmethod
    def parse(cls, text: str) -> Workload:
        prompts, samples, max_tokens = (int(part) for part in text.split("x"))
        return cls(prompts, samples, max_tokens)

    @property
    def tokens(self) -> int:
        return self.prompts * self.samples * self.max_tokens

    def __str__(self) -> str:
        return f"{self.prompts}x{self.samples}x{self.max_tokens}"


def process_cpu_seconds(pid: int) -> float:
    """User + system cpu seconds a process has used so far (from /proc, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def timed_rounds(
    client: SamplingClient, workload: Workload, repeats: int, engine_pid: int | None = None
) -> list[Timer]:
    """`repeats` timed rounds of every prompt's `samples` samples, all asked for at once; cpu time
    includes the engine process's, if there is one."""
    prompts = make_prompts(workload.prompts)
    params = SamplingParams(max_tokens=workload.max_tokens, temperature=1.0)
    timers = []
    for _ in range(repeats):
        engine_cpu = 0.0 if engine_pid is None else process_cpu_seconds(engine_pid)
        with Timer() as timer:
            results = await asyncio.gather(
                *(client.sample(ModelInput.from_ints(p), workload.samples, params) for p in prompts)
            )
        if engine_pid is not None:
            timer.cpu += process_cpu_seconds(engine_pid) - engine_cpu
        assert all(len(s.tokens) == workload.max_tokens for r in results for s in r.sequences)
        timers.append(timer)
    return timers


def sampler_runs(
    name: str, workloads: list[Workload], repeats: int, scratch: Path, vllm: VllmSettings | None
) -> dict[Workload, list[Timer]]:
    """Each workload's timed rounds on one backend: kitchen's sampler, or one vLLM engine."""
    backend = LocalBackend(checkpoint_dir=scratch / "run" / "checkpoints", device="cpu", vllm=vllm)

    async def run() -> dict[Workload, list[Timer]]:
        client = await backend.create_sampling_client(base_model=name)
        await client.sample(ModelInput.from_ints([11, 12, 13]), 2, SamplingParams(max_tokens=4, seed=0))  # warm-up
        engine = getattr(client, "engine", None)  # a vLLM client's
        pid = None if engine is None else engine.pid
        return {w: await timed_rounds(client, w, repeats, pid) for w in workloads}

    try:
        return asyncio.run(run())
    finally:
        asyncio.run(backend.close())


def engine_runs(
    name: str, workloads: list[Workload], repeats: int, scratch: Path, config: str
) -> dict[Workload, list[Timer]]:
    """The workloads on an engine started with `config` (THREADS or THREADS:BLOCKTIME)."""
    threads, _, blocktime = config.partition(":")
    saved = os.environ.get("KMP_BLOCKTIME")
    if blocktime:
        os.environ["KMP_BLOCKTIME"] = blocktime  # the engine's environment is this one's, plus kitchen's defaults
    try:
        return sampler_runs(name, workloads, repeats, scratch, VllmSettings(cpu_threads=int(threads)))
    finally:
        if saved is None:
            os.environ.pop("KMP_BLOCKTIME", None)
        else:
            os.environ["KMP_BLOCKTIME"] = saved


def hf_runs(name: str, workload: Workload, repeats: int) -> list[Timer]:
    prompts = [p for p in make_prompts(workload.prompts) for _ in range(workload.samples)]
    return [hf_generate(name, prompts, workload.max_tokens) for _ in range(repeats)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="50m", help="tiny32, 32m or 50m")
    parser.add_argument("--workloads", default="16x4x64,16x8x128", help="PROMPTSxSAMPLESxTOKENS, comma-separated")
    parser.add_argument("--engines", default="1,2:200", help="vLLM engine configs THREADS[:BLOCKTIME_MS]")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of kitchen's sampler and HF")
    parser.add_argument("--hf", action=argparse.BooleanOptionalAction, default=True, help="time HF generate too")
    args = parser.parse_args()
    if importlib.util.find_spec("vllm") is None:
        print("vLLM is not installed here: run it with .venv-vllm/bin/python (bash scripts/setup_vllm.sh makes it)")
        return
    torch.set_num_threads(args.threads)
    workloads = [Workload.parse(w) for w in args.workloads.split(",")]
    engines = args.engines.split(",")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        name = model_name(args.size, scratch)
        sides = {f"vLLM {config}": engine_runs(name, workloads, args.repeats, scratch, config) for config in engines}
        sides["kitchen"] = sampler_runs(name, workloads, args.repeats, scratch, None)
        if args.hf:
            sides["HF generate"] = {w: hf_runs(name, w, args.repeats) for w in workloads}
    print(
        f"{args.size}, float32, {args.repeats} repeats; kitchen and HF on {args.threads} torch thread(s); vLLM "
        f"engines THREADS[:KMP_BLOCKTIME ms]; machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    for workload in workloads:
        wall = {side: workload.tokens / statistics.median(t.wall for t in by[workload]) for side, by in sides.items()}
        cpu = {side: workload.tokens / statistics.median(t.cpu for t in by[workload]) for side, by in sides.items()}
        print(f"{workload} (prompts x samples x tokens):")
        for side in sides:
            print(
                f"  {side:<14} {wall[side]:6.0f} tok/s wall clock, {cpu[side]:6.0f} tok per cpu-second; /kitchen: "
                f"{cpu[side] / cpu['kitchen']:.2f} per cpu-second, {wall[side] / wall['kitchen']:.2f} wall clock"
            )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
