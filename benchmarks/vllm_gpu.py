"""On a CUDA GPU: the vLLM rollout engine against Hugging Face `generate` (batched) on a ~0.53B
random-weight model, and one RL step (weight sync + sampling + a training step) with vLLM
against the same step with kitchen's own sampler.

    .venv-vllm/bin/python benchmarks/vllm_gpu.py [--prompts 64] [--samples 8] [--max-tokens 256] [--cuda-graphs]

Without a CUDA GPU (or without vLLM) it says so and exits 0. The model is the Qwen3 architecture
built from a config (hidden 1024, 28 layers, the tiny tokenizer), bfloat16. Sampling: every prompt
`--samples` times at temperature 1, `--max-tokens` tokens each; HF `generate` gets the whole
batch at once. RL step (with vLLM, with vLLM in sleep mode while the trainer computes, and with
kitchen's sampler): save_weights_and_get_sampling_client (the sync), the samples, then
forward_backward (cross-entropy on the samples, in micro-batches of at most `--microbatch-tokens`
padded tokens: 64 x 8 samples of ~280 tokens are ~143k tokens, whose activations in one pass
would not fit) and optim_step; medians of `--repeats` steps after one warm-up step. Goals: vLLM
>= 5x HF generate; the step's times are printed side by side. Each figure is printed as soon as
it is measured (a later failure leaves the earlier ones), ratios with the card's name.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from adapters.common.tiny import EMBEDDED_MODELS, TINY32_MODEL_NAME, TINY_DIR
from adapters.local.backend import LocalBackend
from adapters.local.training_client import TrainingOptions
from adapters.local.vllm_settings import VllmSettings
from benchmarks.sampling_vs_hf import hf_inputs, make_prompts
from train_core.types import AdamParams, Datum, ModelInput, SamplingParams, TensorData

QWEN3_530M = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "max_position_embeddings": 4096,
}


def build_model(directory: Path) -> str:
    config = AutoConfig.from_pretrained(EMBEDDED_MODELS[TINY32_MODEL_NAME])
    for key, value in QWEN3_530M.items():
        setattr(config, key, value)
    config.layer_types = ["full_attention"] * config.num_hidden_layers
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters")
    model.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(TINY_DIR / name, directory / name)
    return str(directory)


def seconds(run: Any) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def hf_seconds(name: str, prompts: list[list[int]], max_tokens: int) -> float:
    model: Any = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16)
    model = model.cuda().eval()
    input_ids, kwargs = hf_inputs(prompts, max_tokens)
    input_ids, kwargs["attention_mask"] = input_ids.cuda(), kwargs["attention_mask"].cuda()
    with torch.no_grad():
        model.generate(input_ids[:2], **{**kwargs, "attention_mask": kwargs["attention_mask"][:2], "max_new_tokens": 2})
        return seconds(lambda: model.generate(input_ids, **kwargs))


def sample_data(prompts: list[list[int]], results: list[Any]) -> list[Datum]:
    data = []
    for prompt, result in zip(prompts, results, strict=True):
        for sequence in result.sequences:
            tokens = prompt + sequence.tokens
            weights = [0.0] * (len(prompt) - 1) + [1.0] * len(sequence.tokens)
            data.append(
                Datum(
                    ModelInput.from_ints(tokens[:-1]),
                    {
                        "target_tokens": TensorData.from_list(tokens[1:], "int64"),
                        "weights": TensorData.from_list(weights, "float32"),
                    },
                )
            )
    return data


def rl_steps(
    name: str,
    sampler: str,
    prompts: list[list[int]],
    samples: int,
    max_tokens: int,
    repeats: int,
    scratch: Path,
    microbatch_tokens: int,
    cuda_graphs: bool,
) -> dict[str, float]:
    """Median seconds of sync, sampling and training over `repeats` steps (after a warm-up);
    `sampler` is kitchen, vllm or vllm-sleep (`local.vllm.sleep`: the engine sleeps while the
    trainer computes, and its wake-up is part of the sampling time)."""
    vllm = None if sampler == "kitchen" else VllmSettings(sleep=sampler == "vllm-sleep", enforce_eager=not cuda_graphs)
    backend = LocalBackend(
        scratch / f"{sampler}-run" / "checkpoints",
        device="cuda",
        dtype="bfloat16",
        vllm=vllm,
        training=TrainingOptions(max_tokens_per_microbatch=microbatch_tokens),
    )
    params = SamplingParams(max_tokens=max_tokens, temperature=1.0)

    async def run() -> dict[str, float]:
        training = await backend.create_training_client(name)
        times: dict[str, list[float]] = {"sync": [], "sample": [], "train": []}
        for step in range(repeats + 1):
            start = time.perf_counter()
            client = await training.save_weights_and_get_sampling_client()
            synced = time.perf_counter()
            results = await asyncio.gather(*(client.sample(ModelInput.from_ints(p), samples, params) for p in prompts))
            sampled = time.perf_counter()
            await (await training.forward_backward(sample_data(prompts, results), "cross_entropy"))
            await (await training.optim_step(AdamParams(learning_rate=1e-5)))
            trained = time.perf_counter()
            if step > 0:  # the first step starts the engine and warms everything up
                times["sync"].append(synced - start)
                times["sample"].append(sampled - synced)
                times["train"].append(trained - sampled)
        return {part: statistics.median(values) for part, values in times.items()}

    try:
        return asyncio.run(run())
    finally:
        asyncio.run(backend.close())


def vllm_sampling_seconds(
    name: str, prompts: list[list[int]], samples: int, max_tokens: int, scratch: Path, cuda_graphs: bool
) -> float:
    vllm = VllmSettings(enforce_eager=not cuda_graphs)
    backend = LocalBackend(scratch / "vllm-sampling" / "checkpoints", device="cuda", dtype="bfloat16", vllm=vllm)
    params = SamplingParams(max_tokens=max_tokens, temperature=1.0)

    async def run() -> float:
        client = await backend.create_sampling_client(base_model=name)
        await client.sample(ModelInput.from_ints(prompts[0]), 2, SamplingParams(max_tokens=4, seed=0))  # warm-up
        start = time.perf_counter()
        await asyncio.gather(*(client.sample(ModelInput.from_ints(p), samples, params) for p in prompts))
        return time.perf_counter() - start

    try:
        return asyncio.run(run())
    finally:
        asyncio.run(backend.close())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--microbatch-tokens", type=int, default=16384, help="local.max_tokens_per_microbatch")
    parser.add_argument("--cuda-graphs", action="store_true", help="vLLM with CUDA graphs (enforce_eager=false)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU on this machine: this benchmark needs one (benchmarks/vllm_sampling.py is the CPU one)")
        return
    if importlib.util.find_spec("vllm") is None:
        print("vLLM is not installed here: run it with .venv-vllm/bin/python (bash scripts/setup_vllm.sh makes it)")
        return
    card = torch.cuda.get_device_name()
    prompts = make_prompts(args.prompts)
    tokens = args.prompts * args.samples * args.max_tokens
    graphs = "CUDA graphs" if args.cuda_graphs else "eager"
    shape = f"{args.prompts} prompts x {args.samples} samples x {args.max_tokens} tokens"
    print(f"{card}: {shape}, bfloat16, vLLM {graphs}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        name = build_model(scratch / "qwen3-530m")
        hf = hf_seconds(name, [p for p in prompts for _ in range(args.samples)], args.max_tokens)
        print(f"  HF generate {tokens / hf:8.0f} tok/s", flush=True)
        torch.cuda.empty_cache()  # HF's model is gone: its memory goes back before the engine starts
        engine = vllm_sampling_seconds(name, prompts, args.samples, args.max_tokens, scratch, args.cuda_graphs)
        print(f"  vLLM {tokens / engine:8.0f} tok/s; vLLM/HF generate {hf / engine:.2f}", flush=True)
        totals = {}
        for sampler in ("vllm", "vllm-sleep", "kitchen"):
            parts = rl_steps(
                name,
                sampler,
                prompts,
                args.samples,
                args.max_tokens,
                args.repeats,
                scratch,
                args.microbatch_tokens,
                args.cuda_graphs,
            )
            totals[sampler] = sum(parts.values())
            print(
                f"  RL step with {sampler:<10} sync {parts['sync']:.2f} s, sample {parts['sample']:.2f} s, "
                f"train {parts['train']:.2f} s, total {totals[sampler]:.2f} s",
                flush=True,
            )
    step_ratio = totals["kitchen"] / totals["vllm"]
    print(f"ratio on {card}: vLLM/HF generate {hf / engine:.2f}; RL step kitchen/vLLM {step_ratio:.2f}")


if __name__ == "__main__":
    main()
