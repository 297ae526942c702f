"""Batched sampling speed: kitchen's local sampler against Hugging Face `generate`.

    PYTHONPATH=. python benchmarks/sampling_vs_hf.py [--sizes tiny,50m] [--prompts 16] [--max-tokens 48]

The same model (the embedded tiny model, or a ~50M-parameter random Qwen3-architecture model built
here), the same prompts (random token lists of varied length), the same token budget and
temperature 1 with no top-k / top-p, float32 on the CPU with the same torch threads. Kitchen: one
`sample` call per prompt, all issued together (`asyncio.gather`), which its request batcher runs as
one KV-cache decode; it returns every token's logprob. HF: one `generate` call on the left-padded
batch (`do_sample=True, top_k=0`), forced to the full budget (`min_new_tokens`), no scores asked
for. Both decode exactly `--max-tokens` tokens per prompt. The two alternate `--repeats` times;
medians count (a shared machine is noisy). The last line is the ratio kitchen tokens/s / HF
tokens/s (goal: >= 1.2).
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

from adapters.local.backend import LocalBackend
from adapters.local.model_loading import load_base_model
from benchmarks._models import model_name
from train_core.types import ModelInput, SamplingParams

PAD_ID = 46  # the tiny tokenizer's


def make_prompts(count: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(10, 1500) for _ in range(rng.randint(8, 40))] for _ in range(count)]


def hf_generate(name: str, prompts: list[list[int]], max_tokens: int) -> float:
    model: Any = load_base_model(name, torch.float32)
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), PAD_ID, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
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
    torch.manual_seed(0)
    model.generate(input_ids[:2], **{**kwargs, "attention_mask": mask[:2], "max_new_tokens": 2, "min_new_tokens": 2})
    started = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids, **kwargs)
    seconds = time.perf_counter() - started
    assert out.shape[1] == width + max_tokens
    return seconds


def kitchen_sample(name: str, prompts: list[list[int]], max_tokens: int, scratch: Path) -> float:
    backend = LocalBackend(checkpoint_dir=scratch / "ckpt", device="cpu")

    async def run() -> float:
        client = await backend.create_sampling_client(base_model=name)
        await client.sample(ModelInput.from_ints(prompts[0]), 1, SamplingParams(max_tokens=2, seed=0))  # warm-up
        params = SamplingParams(max_tokens=max_tokens, temperature=1.0)
        started = time.perf_counter()
        results = await asyncio.gather(*(client.sample(ModelInput.from_ints(p), 1, params) for p in prompts))
        seconds = time.perf_counter() - started
        assert all(len(r.sequences[0].tokens) == max_tokens for r in results)
        return seconds

    try:
        return asyncio.run(run())
    finally:
        asyncio.run(backend.close())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="tiny,50m")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    prompts = make_prompts(args.prompts)
    tokens = args.prompts * args.max_tokens
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for size in args.sizes.split(","):
            name = model_name(size, scratch)
            hf_s, kitchen_s = [], []
            for _ in range(args.repeats):
                hf_s.append(hf_generate(name, prompts, args.max_tokens))
                kitchen_s.append(kitchen_sample(name, prompts, args.max_tokens, scratch))
            h, k = statistics.median(hf_s), statistics.median(kitchen_s)
            ratios.append(h / k)
            print(
                f"{size}: {args.prompts} prompts x {args.max_tokens} tokens, {args.repeats} repeats, "
                f"{args.threads} thread(s): HF generate {tokens / h:.0f} tok/s, kitchen {tokens / k:.0f} tok/s, "
                f"kitchen/HF {h / k:.3f}"
            )
    sizes = args.sizes.split(",")
    print(
        "ratio (kitchen/HF tokens per second): " + ", ".join(f"{s} {r:.3f}" for s, r in zip(sizes, ratios, strict=True))
    )


if __name__ == "__main__":
    main()
