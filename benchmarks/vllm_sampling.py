"""Sampling throughput of the rollout engines on the CPU: vLLM (`local.sampler: vllm`) against
kitchen's own sampler and Hugging Face `generate`, on the ~50M-parameter model.

    .venv-vllm/bin/python benchmarks/vllm_sampling.py [--size 50m] [--prompts 16] [--samples 4] [--max-tokens 64]

Needs vLLM (`bash scripts/setup_vllm.sh` makes .venv-vllm); without it, it says so and exits.
The same random-weight model, the same prompts (random token lists of varied length, each asked
for `--samples` samples), `--max-tokens` tokens each, temperature 1, float32. Kitchen and HF run
in this process on `--threads` torch threads (`benchmarks/sampling_vs_hf.py` times them the same
way); vLLM runs in its engine process, started once and warmed up, and is timed from here. Each
side is timed by the wall clock and by cpu time: for vLLM the engine process's and this one's
together, so "tokens per cpu-second" compares the work done, whatever the machine's load. Medians
of `--repeats`. Goal: vLLM >= 1.3x kitchen's sampler per cpu-second on the 50M model.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import platform
import statistics
import tempfile
from pathlib import Path

import torch

from adapters.local.backend import LocalBackend
from adapters.local.vllm_sampling_client import VllmSamplingClient
from adapters.local.vllm_settings import VllmSettings
from benchmarks._models import model_name
from benchmarks.sampling_vs_hf import Timer, hf_generate, kitchen_sample, make_prompts
from train_core.types import ModelInput, SamplingParams


def process_cpu_seconds(pid: int) -> float:
    """User + system cpu seconds a process has used so far (from /proc, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vllm_runs(name: str, prompts: list[list[int]], max_tokens: int, repeats: int, scratch: Path) -> list[Timer]:
    """`repeats` timed rounds of every prompt sampled once, on one engine; cpu time includes the
    engine process's."""
    backend = LocalBackend(checkpoint_dir=scratch / "vllm-run" / "checkpoints", device="cpu", vllm=VllmSettings())

    async def run() -> list[Timer]:
        client = await backend.create_sampling_client(base_model=name)
        assert isinstance(client, VllmSamplingClient)
        await client.sample(ModelInput.from_ints(prompts[0]), 2, SamplingParams(max_tokens=4, seed=0))  # warm-up
        pid = client.engine.pid
        assert pid is not None
        params = SamplingParams(max_tokens=max_tokens, temperature=1.0)
        timers = []
        for _ in range(repeats):
            engine_cpu = process_cpu_seconds(pid)
            with Timer() as timer:
                results = await asyncio.gather(*(client.sample(ModelInput.from_ints(p), 1, params) for p in prompts))
            timer.cpu += process_cpu_seconds(pid) - engine_cpu
            assert all(len(r.sequences[0].tokens) == max_tokens for r in results)
            timers.append(timer)
        return timers

    try:
        return asyncio.run(run())
    finally:
        asyncio.run(backend.close())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="50m", help="tiny, 32m or 50m")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=4, help="samples per prompt")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of kitchen's sampler and HF")
    args = parser.parse_args()
    if importlib.util.find_spec("vllm") is None:
        print("vLLM is not installed here: run it with .venv-vllm/bin/python (bash scripts/setup_vllm.sh makes it)")
        return
    torch.set_num_threads(args.threads)
    prompts = [p for p in make_prompts(args.prompts) for _ in range(args.samples)]
    tokens = len(prompts) * args.max_tokens
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        name = model_name(args.size, scratch)
        sides = {
            "vLLM": vllm_runs(name, prompts, args.max_tokens, args.repeats, scratch),
            "kitchen": [kitchen_sample(name, prompts, args.max_tokens, scratch) for _ in range(args.repeats)],
            "HF generate": [hf_generate(name, prompts, args.max_tokens) for _ in range(args.repeats)],
        }
    wall = {side: tokens / statistics.median(t.wall for t in runs) for side, runs in sides.items()}
    cpu = {side: tokens / statistics.median(t.cpu for t in runs) for side, runs in sides.items()}
    print(
        f"{args.size}: {args.prompts} prompts x {args.samples} samples x {args.max_tokens} tokens, float32, "
        f"{args.repeats} repeats, {args.threads} torch thread(s); machine: "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at the end"
    )
    for side in sides:
        print(f"  {side:<12} {wall[side]:7.0f} tok/s wall clock, {cpu[side]:7.0f} tok per cpu-second")
    print(
        f"ratio vLLM/kitchen: {cpu['vLLM'] / cpu['kitchen']:.2f} per cpu-second (wall clock "
        f"{wall['vLLM'] / wall['kitchen']:.2f}); vLLM/HF generate: {cpu['vLLM'] / cpu['HF generate']:.2f} per "
        f"cpu-second (wall clock {wall['vLLM'] / wall['HF generate']:.2f})"
    )


if __name__ == "__main__":
    main()
