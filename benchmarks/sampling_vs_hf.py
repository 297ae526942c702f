"""Batched sampling speed: kitchen's local sampler against Hugging Face `generate`.

    PYTHONPATH=. python benchmarks/sampling_vs_hf.py [--sizes tiny,50m] [--prompts 16] [--max-tokens 48] [--no-profile]

The same model (the embedded tiny model, or a ~50M-parameter random Qwen3-architecture model built
here), the same prompts (random token lists of varied length), the same token budget and
temperature 1 with no top-k / top-p, float32 on the CPU with the same torch threads. Kitchen: one
`sample` call per prompt, all issued together (`asyncio.gather`), which its request batcher runs as
one KV-cache decode; it returns every token's logprob. HF: one `generate` call on the left-padded
batch (`do_sample=True, top_k=0`), forced to the full budget (`min_new_tokens`), no scores asked
for. Both decode exactly `--max-tokens` tokens per prompt. The two alternate `--repeats` times;
medians count. Each run is timed by the wall clock and by the process's cpu time: on a shared
machine the wall clock also counts the time other processes hold the cores, the cpu time only
this process's work (both sides run one torch thread). Unless `--no-profile`, the last size is
then profiled once per side (torch.profiler, top ops by self cpu time; kitchen's decode called
directly, as its worker thread escapes the profiler), which shows where the time goes. The last
line is the ratio kitchen tokens/s / HF tokens/s, wall clock and cpu time (goal: >= 1.2).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from adapters.common.stop_matcher import StopMatcher
from adapters.common.tokenizer import load_tokenizer
from adapters.local.backend import LocalBackend
from adapters.local.forward_pass import left_pad
from adapters.local.model_loading import load_base_model
from adapters.local.sampler import SampleRequest, sample_batch
from benchmarks._models import model_name
from train_core.types import ModelInput, SamplingParams

PAD_ID = 46  # the tiny tokenizer's


def make_prompts(count: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(10, 1500) for _ in range(rng.randint(8, 40))] for _ in range(count)]


class Timer:
    """Wall-clock and process cpu seconds of the `with` block."""

    def __enter__(self) -> Timer:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self._wall, time.process_time() - self._cpu


def hf_inputs(prompts: list[list[int]], max_tokens: int) -> tuple[torch.Tensor, dict[str, Any]]:
    """The left-padded batch and the `generate` arguments that decode exactly `max_tokens` tokens."""
    input_ids, mask, _ = left_pad(prompts, PAD_ID, torch.device("cpu"))
    kwargs = {
        "attention_mask": mask,
        "do_sample": True,
        "temperature": 1.0,
        "top_k": 0,
        "top_p": 1.0,
        "max_new_tokens": max_tokens,
        "min_new_tokens": max_tokens,
        "pad_token_id": PAD_ID,
    }
    return input_ids, kwargs


def hf_generate(name: str, prompts: list[list[int]], max_tokens: int) -> Timer:
    model: Any = load_base_model(name, torch.float32)
    input_ids, kwargs = hf_inputs(prompts, max_tokens)
    torch.manual_seed(0)
    warm_up = {**kwargs, "attention_mask": kwargs["attention_mask"][:2], "max_new_tokens": 2, "min_new_tokens": 2}
    model.generate(input_ids[:2], **warm_up)
    with Timer() as timer, torch.no_grad():
        out = model.generate(input_ids, **kwargs)
    assert out.shape[1] == input_ids.shape[1] + max_tokens
    return timer


def kitchen_sample(name: str, prompts: list[list[int]], max_tokens: int, scratch: Path) -> Timer:
    backend = LocalBackend(checkpoint_dir=scratch / "ckpt", device="cpu")

    async def run() -> Timer:
        client = await backend.create_sampling_client(base_model=name)
        await client.sample(ModelInput.from_ints(prompts[0]), 1, SamplingParams(max_tokens=2, seed=0))  # warm-up
        params = SamplingParams(max_tokens=max_tokens, temperature=1.0)
        with Timer() as timer:
            results = await asyncio.gather(*(client.sample(ModelInput.from_ints(p), 1, params) for p in prompts))
        assert all(len(r.sequences[0].tokens) == max_tokens for r in results)
        return timer

    try:
        return asyncio.run(run())
    finally:
        asyncio.run(backend.close())


def print_profiles(name: str, prompts: list[list[int]], max_tokens: int, top: int = 8) -> None:
    """The top ops by self cpu time of one HF `generate` and one kitchen decode of the same batch."""
    model: Any = load_base_model(name, torch.float32)
    input_ids, kwargs = hf_inputs(prompts, max_tokens)
    params = SamplingParams(max_tokens=max_tokens, temperature=1.0)
    stop = StopMatcher(None, load_tokenizer(name))
    requests = [SampleRequest(p, 1, max_tokens, seed, params, stop) for seed, p in enumerate(prompts)]
    sides = {
        "HF generate": lambda: model.generate(input_ids, **kwargs),
        "kitchen sample_batch": lambda: sample_batch(model, requests, PAD_ID),
    }
    for run in sides.values():
        run()  # warm-up: the first forward also pages the weights in
    for side, run in sides.items():
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
            run()
        events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        total = sum(e.self_cpu_time_total for e in events)
        print(f"{side}: {total / 1e6:.2f} s self cpu under the profiler; top ops:")
        for e in events[:top]:
            share = 100 * e.self_cpu_time_total / total
            print(f"  {e.key:<52} {e.self_cpu_time_total / 1e3:8.0f} ms {share:5.1f}% {e.count:6d} calls")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="tiny,50m")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    prompts = make_prompts(args.prompts)
    tokens = args.prompts * args.max_tokens
    ratios: list[tuple[float, float]] = []
    sizes = args.sizes.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for size in sizes:
            name = model_name(size, scratch)
            hf_runs, kitchen_runs = [], []
            for _ in range(args.repeats):
                hf_runs.append(hf_generate(name, prompts, args.max_tokens))
                kitchen_runs.append(kitchen_sample(name, prompts, args.max_tokens, scratch))
            hw, kw = (statistics.median(t.wall for t in runs) for runs in (hf_runs, kitchen_runs))
            hc, kc = (statistics.median(t.cpu for t in runs) for runs in (hf_runs, kitchen_runs))
            ratios.append((hw / kw, hc / kc))
            print(
                f"{size}: {args.prompts} prompts x {args.max_tokens} tokens, {args.repeats} repeats, "
                f"{args.threads} thread(s): wall clock HF generate {tokens / hw:.0f} tok/s, kitchen {tokens / kw:.0f} "
                f"tok/s, kitchen/HF {hw / kw:.3f}; cpu time HF {tokens / hc:.0f} tok/s, kitchen {tokens / kc:.0f} "
                f"tok/s, kitchen/HF {hc / kc:.3f}"
            )
        if args.profile:
            print_profiles(name, prompts, args.max_tokens)
    print(
        "ratio (kitchen/HF tokens per second): "
        + ", ".join(f"{s} {wall:.3f} (cpu time {cpu:.3f})" for s, (wall, cpu) in zip(sizes, ratios, strict=True))
    )


if __name__ == "__main__":
    main()
