"""kitchen's GPU path, checked on the machine this runs on: `bash scripts/gpu_check.sh [--cpu]`.

Every step builds its models from configs (random weights, no download): a tied Qwen3-0.6B (the
real 151,936-token vocabulary) and an untied ~1.7B; `--cpu` runs the same steps on the embedded
tiny model's shapes, to check the script itself. Each step is time-boxed; the results are one
JSON document (stdout, and `--out`); the exit status is 1 when a step failed. Without a GPU (and
without `--cpu`) it says so and exits 0. The steps are listed in `STEPS` and in the docs
(docs/explanation/performance.md, "Checking a GPU").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import platform
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig  # noqa: E402
from transformers.utils import logging as transformers_logging  # noqa: E402

from adapters.common.tiny import TINY_DIR  # noqa: E402
from adapters.common.tokenizer import load_tokenizer  # noqa: E402
from adapters.local import forward_pass, unpadded_rows  # noqa: E402
from adapters.local.checkpoint_io import ModelIdentity  # noqa: E402
from adapters.local.forward_pass import sequence_logprobs  # noqa: E402
from adapters.local.model_loading import LoraOptions, add_lora, use_cuda_device  # noqa: E402
from adapters.local.serial_executor import SerialExecutor  # noqa: E402
from adapters.local.training_client import LocalTrainingClient, TrainingOptions  # noqa: E402
from benchmarks._models import QWEN3_0_6B as BENCH_QWEN3_0_6B  # noqa: E402
from benchmarks._models import peak_bf16_tflops, training_flops_per_token  # noqa: E402
from train_core.losses import CROSS_ENTROPY  # noqa: E402
from train_core.types import AdamParams, Datum, ModelInput, SamplingParams, TensorData  # noqa: E402

QWEN3_0_6B = {**BENCH_QWEN3_0_6B, "tie_word_embeddings": True}
QWEN3_1_7B = {
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151_936,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
}
TINY_UNTIED = {"tie_word_embeddings": False}


@dataclass(frozen=True)
class Shapes:
    """What the steps run on: a GPU's real shapes, or the tiny ones of `--cpu`."""

    small: dict[str, Any]
    big: dict[str, Any]
    lengths: tuple[int, int]
    """Sequence lengths of the throughput batches (uniform in this range)."""
    sequences: int
    dpo: tuple[int, int, int]
    """DPO pairs, prompt tokens, reply tokens."""
    sample: tuple[int, int]
    """Prompts and tokens each for the sampler."""
    microbatch_tokens: int
    step_seconds: float
    timed_steps: int


GPU = Shapes(QWEN3_0_6B, QWEN3_1_7B, (512, 2048), 16, (32, 512, 256), (16, 256), 8192, 90.0, 2)
CPU = Shapes({}, TINY_UNTIED, (8, 40), 6, (4, 16, 8), (4, 16), 64, 120.0, 1)


@dataclass
class Check:
    """One run of the steps: where, on what, and what came out."""

    device: torch.device
    shapes: Shapes
    scratch: Path
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def config(self, shape: dict[str, Any]) -> PretrainedConfig:
        config = AutoConfig.from_pretrained(TINY_DIR)
        for key, value in shape.items():
            setattr(config, key, value)
        config.layer_types = ["full_attention"] * config.num_hidden_layers
        return config

    def model(self, shape: dict[str, Any], dtype: torch.dtype, seed: int = 0) -> torch.nn.Module:
        """Random weights from the config, made on the device (no download, no disk)."""
        with torch.random.fork_rng(devices=[]), torch.device(self.device):
            torch.manual_seed(seed)
            return AutoModelForCausalLM.from_config(self.config(shape), dtype=dtype).eval()

    def client(
        self, model: torch.nn.Module, options: TrainingOptions | None = None, lora_rank: int | None = None
    ) -> LocalTrainingClient:
        if lora_rank is not None:
            model = add_lora(model, lora_rank, 0, LoraOptions()).to(self.device)
        return LocalTrainingClient(
            model,
            load_tokenizer("tiny"),
            ModelIdentity("gpu-check", lora_rank, 0),
            self.scratch / "checkpoints",
            SerialExecutor("gpu-check-sampling"),
            random.Random(0),
            options=options,
        )

    def synchronize(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def peak_memory_gib(self) -> float | None:
        return torch.cuda.max_memory_allocated() / 2**30 if self.cuda else None

    def reset_memory(self) -> None:
        gc.collect()  # the previous setup's clients and models
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()


# -- data --------------------------------------------------------------------------------------


def sft_batch(vocab: int, lengths: Sequence[int], seed: int) -> list[Datum]:
    rng = random.Random(seed)
    data = []
    for length in lengths:
        tokens = [rng.randrange(1, vocab) for _ in range(length + 1)]
        data.append(
            Datum(
                ModelInput.from_ints(tokens[:-1]),
                {
                    "target_tokens": TensorData.from_list(tokens[1:], "int64"),
                    "weights": TensorData.from_list([1.0] * length, "float32"),
                },
            )
        )
    return data


def lengths(check: Check, seed: int) -> list[int]:
    rng = random.Random(seed)
    low, high = check.shapes.lengths
    return [rng.randint(low, high) for _ in range(check.shapes.sequences)]


def shared_prefix_sequences(vocab: int, seed: int, scale: int) -> list[list[int]]:
    """Groups that share prompts (as DPO pairs and RL groups do) and unrelated sequences."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(1, vocab) for _ in range(rng.randint(4 * scale, 12 * scale))] for _ in range(3)]
    replies = [[rng.randrange(1, vocab) for _ in range(n * scale)] for n in (0, 2, 5)]
    unrelated = [[rng.randrange(1, vocab) for _ in range(n * scale)] for n in (2, 7, 15)]
    return [p + r for p in prompts for r in replies] + unrelated


def run(future: Any) -> Any:
    return asyncio.run(_await(future))


async def _await(awaitable: Any) -> Any:
    result = await awaitable
    return await result if asyncio.isfuture(result) or asyncio.iscoroutine(result) else result


def train_steps(client: LocalTrainingClient, data: list[Datum], steps: int, lr: float = 1e-5) -> list[float]:
    async def go() -> list[float]:
        losses = []
        for _ in range(steps):
            out = await (await client.forward_backward(data, "cross_entropy"))
            losses.append(out.metrics["loss:sum"])
            await (await client.optim_step(AdamParams(learning_rate=lr)))
        return losses

    return asyncio.run(go())


def tokens_per_second(check: Check, client: LocalTrainingClient, data: list[Datum]) -> dict[str, float]:
    train_steps(client, data, 1)  # warm-up (allocations, kernels, compilation)
    check.synchronize()
    start = time.perf_counter()
    train_steps(client, data, check.shapes.timed_steps)
    check.synchronize()
    seconds = (time.perf_counter() - start) / check.shapes.timed_steps
    tokens = sum(d.model_input.length for d in data)
    return {"step_seconds": seconds, "tokens_per_second": tokens / seconds}


def mfu(check: Check, config: PretrainedConfig, rate: float, context: float, passes: float = 1.0) -> float | None:
    if not check.cuda:
        return None
    peak = peak_bf16_tflops(torch.cuda.get_device_name())
    return None if peak is None else rate * training_flops_per_token(config, context) * passes / 1e12 / peak


# -- steps -------------------------------------------------------------------------------------


def step_cuda(check: Check) -> dict[str, Any]:
    """Versions, the card, and a bfloat16 matmul against float32 on it."""
    import peft
    import transformers

    out: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "cuda": torch.version.cuda,
        "flex_attention": unpadded_rows.device_route(check.device.type) == "flex",
    }
    if check.cuda:
        properties = torch.cuda.get_device_properties(check.device)
        out |= {
            "card": properties.name,
            "memory_gib": properties.total_memory / 2**30,
            "capability": f"{properties.major}.{properties.minor}",
            "cudnn": torch.backends.cudnn.version(),
            "bf16_supported": torch.cuda.is_bf16_supported(),
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        }
    a, b = torch.randn(256, 256, device=check.device), torch.randn(256, 256, device=check.device)
    error = (a.bfloat16() @ b.bfloat16()).float() - a.double().matmul(b.double()).float()
    out["bf16_matmul_relative_error"] = float(error.norm() / (a @ b).norm())
    if out["bf16_matmul_relative_error"] > 1e-2:
        raise AssertionError(f"bfloat16 matmul is off by {out['bf16_matmul_relative_error']:.2e}")
    return out


def step_attention_routes(check: Check) -> dict[str, Any]:
    """Every route packed sequences take (FlexAttention's trie row, masked rows, each sequence
    alone) against each sequence run alone: logprobs, and gradients against the masked rows'. On
    CUDA under `sdpa_kernel` without the math kernel (a route that needs it fails here)."""
    dtype = torch.bfloat16 if check.cuda else torch.float32
    model = check.model(check.shapes.small, dtype)
    vocab = int(check.config(check.shapes.small).vocab_size)
    sequences = shared_prefix_sequences(vocab, 0, 16 if check.cuda else 1)
    inputs_D, targets_D = [s[:-1] for s in sequences], [s[1:] for s in sequences]
    with torch.no_grad():
        reference = [
            torch.log_softmax(model(input_ids=torch.tensor([x], device=check.device)).logits[0].float(), -1)
            .gather(-1, torch.tensor(y, device=check.device)[:, None])
            .squeeze(-1)
            for x, y in zip(inputs_D, targets_D, strict=True)
        ]
    # route name: (attention route, attention over each sequence alone rather than rows)
    routes: dict[str, tuple[unpadded_rows.AttentionRoute, bool | None]] = {
        "flex_trie": ("flex", None),
        "masked_rows": ("mask", False),
        "each_alone": ("mask", True),
    }
    tolerance = 0.1 if dtype == torch.bfloat16 else 1e-4
    out: dict[str, Any] = {"dtype": str(dtype), "sequences": len(sequences), "tokens": sum(map(len, inputs_D))}
    gradients: dict[str, torch.Tensor] = {}
    with _no_math_kernel(check):
        for name, (route, alone) in routes.items():
            unpadded_rows.set_attention_route(model, route)
            _alone(alone)
            try:
                grad_enabled = check.cuda  # FlexAttention has no backward on the CPU
                with torch.set_grad_enabled(grad_enabled):
                    scored = sequence_logprobs(model, inputs_D, targets_D, 0)
                    if grad_enabled:
                        model.zero_grad(set_to_none=True)
                        torch.cat(scored.logprobs_D).sum().backward()
                        grads = [p.grad.flatten().float() for p in model.parameters() if p.grad is not None]
                        gradients[name] = torch.cat(grads)
            finally:
                _alone(None)
            worst = max(float((a.float() - b).abs().max()) for a, b in zip(scored.logprobs_D, reference, strict=True))
            out[name] = {"max_abs_logprob_error": worst, "slots": scored.slots, "filled": scored.filled}
            if worst > tolerance:
                raise AssertionError(f"{name}: logprobs off by {worst:.3g} (> {tolerance})")
    unpadded_rows.set_attention_route(model, unpadded_rows.device_route(check.device.type))
    for name, grad in gradients.items():
        cosine = float(torch.nn.functional.cosine_similarity(grad, gradients["masked_rows"], dim=0))
        out[name]["gradient_cosine_vs_masked_rows"] = cosine
        if cosine < 0.99:
            raise AssertionError(f"{name}: gradients differ from the masked rows' (cosine {cosine:.4f})")
    return out


_ATTEND_ALONE = forward_pass.attend_alone


def _alone(choice: bool | None) -> None:
    """Force (or with None restore) the choice between attention over rows and per sequence."""
    forward_pass.attend_alone = _ATTEND_ALONE if choice is None else (lambda *_: choice)


@contextlib.contextmanager
def _no_math_kernel(check: Check) -> Iterator[None]:
    if not check.cuda:
        yield  # the CPU has the math kernel and its flash kernel only
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]):
        yield


def step_bf16_step(check: Check) -> dict[str, Any]:
    """One bfloat16 full step: host syncs (CUDA's sync debug mode), the top kernels (profiler),
    the CPU seconds spent packing, and the share of weights a step at lr 1e-5 changes."""
    dtype = torch.bfloat16
    client = check.client(check.model(check.shapes.small, dtype))
    data = sft_batch(client._vocab_size, lengths(check, 1), 1)
    train_steps(client, data, 1)  # warm-up: the step measured below is a steady one
    packing = _time_calls(forward_pass, ("trie_row", "pack_sequences"))
    before = [m.detach().clone() for m in client._masters.masters]
    model_before = [p.detach().clone() for p in client._masters.params]
    syncs: list[str] = []
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if check.cuda else [])
    with packing, profile(activities=activities) as profiler, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if check.cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            train_steps(client, data, 1)
            check.synchronize()
        finally:
            if check.cuda:
                torch.cuda.set_sync_debug_mode(0)
    syncs = [str(w.message).splitlines()[0] for w in caught if "synchroniz" in str(w.message)]
    sort = "self_device_time_total" if check.cuda else "self_cpu_time_total"
    table = profiler.key_averages().table(sort_by=sort, row_limit=10)
    moved = sum(int((a != b).sum()) for a, b in zip(before, client._masters.masters, strict=True))
    total = sum(m.numel() for m in before)
    model_moved = sum(int((a != b).sum()) for a, b in zip(model_before, client._masters.params, strict=True))
    return {
        "host_syncs": len(syncs),
        "host_sync_kinds": sorted(set(syncs))[:10],
        "top_kernels": table.splitlines(),
        "cpu_packing_seconds": packing.seconds,
        "master_weights_changed": moved / total,
        "bf16_weights_changed": model_moved / total,
    }


class _time_calls(contextlib.AbstractContextManager["_time_calls"]):
    """Sum the wall seconds of calls to `module`'s functions `names` while active."""

    def __init__(self, module: Any, names: Sequence[str]) -> None:
        self.module, self.names, self.seconds = module, names, 0.0
        self.saved: dict[str, Any] = {}

    def __enter__(self) -> _time_calls:
        for name in self.names:
            original = self.saved[name] = getattr(self.module, name)

            def timed(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.seconds += time.perf_counter() - start

            setattr(self.module, name, timed)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self.saved.items():
            setattr(self.module, name, original)


def step_throughput(check: Check) -> dict[str, Any]:
    """The 0.6B model on sequences of the throughput range: full bfloat16, LoRA r32, full with
    gradient checkpointing, float32 (TF32): tokens/s, MFU, peak memory."""
    config = check.config(check.shapes.small)
    batch_lengths = lengths(check, 2)
    data = sft_batch(config.vocab_size, batch_lengths, 2)
    context = sum(n * n for n in batch_lengths) / sum(batch_lengths) / 2  # mean causal context of a token
    setups: dict[str, tuple[torch.dtype, int | None, bool]] = {
        "full_bf16": (torch.bfloat16, None, False),
        "lora_r32_bf16": (torch.bfloat16, 32 if check.cuda else 4, False),
        "full_bf16_checkpointing": (torch.bfloat16, None, True),
        "full_fp32": (torch.float32, None, False),
    }
    out: dict[str, Any] = {"tokens": sum(batch_lengths), "sequences": len(batch_lengths)}
    for name, (dtype, rank, checkpointing) in setups.items():
        check.reset_memory()
        client = check.client(
            check.model(check.shapes.small, dtype), TrainingOptions(gradient_checkpointing=checkpointing), rank
        )
        figures = tokens_per_second(check, client, data)
        # LoRA's backward skips the base weights' gradients: about 2/3 of a full step's FLOPs
        passes = 2 / 3 if rank is not None else 1.0
        out[name] = {
            **figures,
            "mfu": mfu(check, config, figures["tokens_per_second"], context, passes),
            "peak_memory_gib": check.peak_memory_gib(),
        }
        del client
    return out


def step_big_model(check: Check) -> dict[str, Any]:
    """The untied ~1.7B model, LoRA and full, with gradient checkpointing and micro-batches."""
    config = check.config(check.shapes.big)
    batch_lengths = lengths(check, 3)
    data = sft_batch(config.vocab_size, batch_lengths, 3)
    options = TrainingOptions(gradient_checkpointing=True, max_tokens_per_microbatch=check.shapes.microbatch_tokens)
    context = sum(n * n for n in batch_lengths) / sum(batch_lengths) / 2
    out: dict[str, Any] = {"parameters": None}
    for name, rank in (("lora_r32", 32 if check.cuda else 4), ("full", None)):
        check.reset_memory()
        model = check.model(check.shapes.big, torch.bfloat16)
        out["parameters"] = sum(p.numel() for p in model.parameters())
        client = check.client(model, options, rank)
        figures = tokens_per_second(check, client, data)
        passes = 2 / 3 if rank is not None else 1.0
        out[name] = {
            **figures,
            "mfu": mfu(check, config, figures["tokens_per_second"], context, passes),
            "peak_memory_gib": check.peak_memory_gib(),
        }
        del client, model
    return out


def step_dpo(check: Check) -> dict[str, Any]:
    """DPO pairs (a shared prompt, two replies) through a custom loss, as the dpo recipe runs them:
    pairs/s (each pair's prompt runs once: the prefix trie)."""
    pairs, prompt_tokens, reply_tokens = check.shapes.dpo
    client = check.client(check.model(check.shapes.small, torch.bfloat16))
    rng = random.Random(4)
    vocab = client._vocab_size
    data = []
    for _ in range(pairs):
        prompt = [rng.randrange(1, vocab) for _ in range(prompt_tokens)]
        for _ in range(2):
            tokens = prompt + [rng.randrange(1, vocab) for _ in range(reply_tokens + 1)]
            data.append(
                Datum(ModelInput.from_ints(tokens[:-1]), {"target_tokens": TensorData.from_list(tokens[1:], "int64")})
            )

    def dpo_loss(batch: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        sums = torch.stack([lp[prompt_tokens - 1 :].sum() for lp in logprobs_D])
        margins = sums[0::2] - sums[1::2]
        return -torch.nn.functional.logsigmoid(0.1 * margins).sum(), {}

    async def step() -> None:
        await (await client.forward_backward_custom(data, dpo_loss))
        await (await client.optim_step(AdamParams(learning_rate=1e-6)))

    asyncio.run(step())  # warm-up
    check.synchronize()
    start = time.perf_counter()
    for _ in range(check.shapes.timed_steps):
        asyncio.run(step())
    check.synchronize()
    seconds = (time.perf_counter() - start) / check.shapes.timed_steps
    return {"pairs": pairs, "step_seconds": seconds, "pairs_per_second": pairs / seconds}


def step_save_load(check: Check) -> dict[str, Any]:
    """save_state, then a fresh client restored from it: masters, optimizer state and logprobs bitwise."""
    client = check.client(check.model(check.shapes.small, torch.bfloat16))
    data = sft_batch(client._vocab_size, lengths(check, 5)[:4], 5)
    train_steps(client, data, 2, lr=1e-4)
    path = Path(run(client.save_state("check")))
    restored = check.client(check.model(check.shapes.small, torch.bfloat16, seed=1))
    restored.restore(path, with_optimizer=True)
    for a, b in zip(client._masters.masters, restored._masters.masters, strict=True):
        if not torch.equal(a, b):
            raise AssertionError("a restored master weight differs")
    for a, b in zip(client._masters.params, restored._masters.params, strict=True):
        if not torch.equal(a, b):
            raise AssertionError("a restored model weight differs")
    state_a, state_b = client._optimizer.state_dict()["state"], restored._optimizer.state_dict()["state"]
    for key, entry in state_a.items():
        for name, value in entry.items():
            if not torch.equal(value.to(state_b[key][name].device), state_b[key][name]):
                raise AssertionError(f"restored optimizer state {name} differs")

    def logprobs(c: LocalTrainingClient) -> list[torch.Tensor]:
        out = run(c.forward(data, "cross_entropy"))
        return [o["logprobs"].to_torch() for o in out.loss_fn_outputs]

    if not all(torch.equal(a, b) for a, b in zip(logprobs(client), logprobs(restored), strict=True)):
        raise AssertionError("a restored client's logprobs differ")
    return {"checkpoint_bytes": sum(f.stat().st_size for f in path.iterdir())}


def step_sampler(check: Check) -> dict[str, Any]:
    """kitchen's own sampler: tokens/s, and its logprobs against the training forward's."""
    prompts, new_tokens = check.shapes.sample
    client = check.client(check.model(check.shapes.small, torch.bfloat16))
    sampler = asyncio.run(client.save_weights_and_get_sampling_client())
    rng = random.Random(6)
    vocab = client._vocab_size
    requests = [ModelInput.from_ints([rng.randrange(1, vocab) for _ in range(32)]) for _ in range(prompts)]
    params = SamplingParams(max_tokens=new_tokens, temperature=1.0)

    async def sample_all() -> list[Any]:
        return list(await asyncio.gather(*(sampler.sample(r, 1, params) for r in requests)))

    check.synchronize()
    start = time.perf_counter()
    responses = asyncio.run(sample_all())
    check.synchronize()
    seconds = time.perf_counter() - start
    sequences = [response.sequences[0] for response in responses]
    generated = sum(len(s.tokens) for s in sequences)
    data = []
    for prompt, sequence in zip(requests, sequences, strict=True):
        tokens = prompt.to_ints() + list(sequence.tokens)
        data.append(
            Datum(ModelInput.from_ints(tokens[:-1]), {"target_tokens": TensorData.from_list(tokens[1:], "int64")})
        )
    trained = run(client.forward([_with_weights(d) for d in data], "cross_entropy"))
    gaps = []
    for prompt, sequence, output in zip(requests, sequences, trained.loss_fn_outputs, strict=True):
        training = output["logprobs"].tolist()[prompt.length - 1 :]
        gaps += [abs(a - b) for a, b in zip(sequence.maybe_logprobs or [], training, strict=False)]
    return {
        "generated_tokens": generated,
        "tokens_per_second": generated / seconds,
        "max_abs_logprob_gap_vs_training": max(gaps) if gaps else None,
        "mean_abs_logprob_gap_vs_training": sum(gaps) / len(gaps) if gaps else None,
    }


def _with_weights(datum: Datum) -> Datum:
    n = datum.model_input.length
    return Datum(datum.model_input, {**datum.loss_fn_inputs, "weights": TensorData.from_list([1.0] * n, "float32")})


class Skip(Exception):
    """A step that cannot run here, with the reason."""


def step_liger(check: Check) -> dict[str, Any]:
    """Liger's fused linear cross-entropy against the chunked head: logprobs and step time."""
    from adapters.local.token_scoring import liger_available

    if not liger_available():
        raise Skip("liger-kernel is not installed (or no CUDA)")
    data = sft_batch(check.config(check.shapes.small).vocab_size, lengths(check, 7), 7)
    out: dict[str, Any] = {}
    logprobs = {}
    for method in ("chunked", "liger"):
        client = check.client(check.model(check.shapes.small, torch.bfloat16), TrainingOptions(logprob_method=method))
        out[method] = tokens_per_second(check, client, data)
        logprobs[method] = [
            o["logprobs"].to_torch() for o in run(client.forward(data, "cross_entropy")).loss_fn_outputs
        ]
    out["max_abs_logprob_gap"] = max(
        float((a - b).abs().max()) for a, b in zip(logprobs["chunked"], logprobs["liger"], strict=True)
    )
    return out


def step_vllm(check: Check) -> dict[str, Any]:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise Skip(
            "vLLM is not installed here: its GPU path (start-up, weight sync, logprobs after sync, an RL step) "
            "is checked by `bash scripts/test_vllm.sh` where it is"
        )
    raise Skip("vLLM is installed: run `bash scripts/test_vllm.sh` (its own suite) for the vLLM steps")


def step_fsdp(check: Check) -> dict[str, Any]:
    """FSDP2 with one worker (NCCL on a GPU, gloo on the CPU), in this process, without Ray: LoRA
    and full, bfloat16 mixed precision, one step against the single-process client's loss."""
    import socket

    import torch.distributed as dist

    from adapters.local.distributed_worker import TrainingWorker

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model_dir = _saved_small_model(check)
    out: dict[str, Any] = {}
    worker = TrainingWorker(0, 1, torch.bfloat16, check.cuda, TrainingOptions(), LoraOptions(), None, None, "127.0.0.1")
    worker.join(f"tcp://127.0.0.1:{port}", 300.0)
    try:
        data = sft_batch(check.config(check.shapes.small).vocab_size, lengths(check, 8)[:4], 8)
        for name, rank in (("lora", 8), ("full", None)):
            worker.build(ModelIdentity(str(model_dir), rank, 0), str(model_dir))
            _, metrics, _, _ = worker.run_loss("forward_backward", CROSS_ENTROPY, {}, data, data[0], 1, True)
            step = worker.optim_step(AdamParams(learning_rate=1e-4))
            single = check.client(_load_small(check, model_dir), lora_rank=rank)
            reference = run(single.forward_backward(data, "cross_entropy")).metrics["loss:sum"]
            gap = abs(metrics["loss:sum"] - reference) / abs(reference)
            out[name] = {"loss": metrics["loss:sum"], "single_process_loss": reference, "relative_gap": gap, **step}
            if gap > 2e-2:
                raise AssertionError(f"FSDP {name}: loss {metrics['loss:sum']} vs {reference} in one process")
            worker.release()
    finally:
        worker.close()
        if dist.is_initialized():
            dist.destroy_process_group()
    return out


def _saved_small_model(check: Check) -> Path:
    """The small model in bfloat16 on disk (with the tiny tokenizer): what loads by name."""
    directory = check.scratch / "small-model"
    if not directory.exists():
        model: Any = check.model(check.shapes.small, torch.bfloat16)  # a transformers model
        model.save_pretrained(directory)
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            if (TINY_DIR / name).exists():
                shutil.copy(TINY_DIR / name, directory / name)
    return directory


def _load_small(check: Check, directory: Path) -> torch.nn.Module:
    from adapters.local.model_loading import load_model

    return load_model(str(directory), None, 0, check.device, torch.bfloat16)


def step_compile(check: Check) -> dict[str, Any]:
    """`local.compile`: logprobs against the eager model's, and how many graphs three batch
    shapes compile (recompiles beyond the first shapes mean shapes did not go dynamic)."""
    import torch._dynamo

    if not check.cuda and shutil.which("g++") is None and shutil.which("c++") is None:
        raise Skip("torch.compile on the CPU needs a C++ compiler")
    torch._dynamo.reset()
    dtype = torch.bfloat16 if check.cuda else torch.float32
    eager = check.client(check.model(check.shapes.small, dtype))
    compiled = check.client(check.model(check.shapes.small, dtype), TrainingOptions(compile=True))
    vocab = eager._vocab_size
    gaps, start = [], time.perf_counter()
    for shape, seed in ((3, 10), (5, 11), (7, 12)):
        batch = sft_batch(vocab, [n * (16 if check.cuda else 2) for n in range(1, shape + 1)], seed)
        a = run(eager.forward(batch, "cross_entropy")).loss_fn_outputs
        b = run(compiled.forward(batch, "cross_entropy")).loss_fn_outputs
        gaps += [
            float((x["logprobs"].to_torch() - y["logprobs"].to_torch()).abs().max()) for x, y in zip(a, b, strict=True)
        ]
    counters = torch._dynamo.utils.counters
    out = {
        "max_abs_logprob_gap": max(gaps),
        "graphs": int(counters["stats"]["unique_graphs"]),
        "recompiles": sum(int(v) for v in counters["recompiles"].values()),
        "seconds": time.perf_counter() - start,
    }
    if out["max_abs_logprob_gap"] > (0.1 if dtype == torch.bfloat16 else 1e-4):
        raise AssertionError(f"compiled logprobs off by {out['max_abs_logprob_gap']:.3g}")
    return out


STEPS: dict[str, Callable[[Check], dict[str, Any]]] = {
    "cuda": step_cuda,
    "attention_routes": step_attention_routes,
    "bf16_step": step_bf16_step,
    "throughput_small": step_throughput,
    "big_model": step_big_model,
    "dpo": step_dpo,
    "save_load": step_save_load,
    "sampler": step_sampler,
    "liger": step_liger,
    "vllm": step_vllm,
    "fsdp_one_worker": step_fsdp,
    "compile": step_compile,
}


class StepTimeout(Exception):
    pass


@contextlib.contextmanager
def time_box(seconds: float) -> Iterator[None]:
    """Raise StepTimeout in this (the main) thread after `seconds`."""

    def expire(signum: int, frame: Any) -> None:
        raise StepTimeout(f"the step took more than {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_step(check: Check, name: str, step: Callable[[Check], dict[str, Any]]) -> dict[str, Any]:
    start = time.perf_counter()
    entry: dict[str, Any] = {"step": name}
    try:
        with time_box(check.shapes.step_seconds):
            entry["results"] = step(check)
        entry["status"] = "ok"
    except Skip as skip:
        entry["status"], entry["reason"] = "skipped", str(skip)
    except Exception as exc:  # every failure is reported, and the next step still runs
        entry["status"], entry["error"] = "failed", f"{type(exc).__name__}: {exc}"
        entry["traceback"] = traceback.format_exc().splitlines()[-12:]
    entry["seconds"] = round(time.perf_counter() - start, 2)
    print(f"gpu_check: {name}: {entry['status']} ({entry['seconds']} s)", file=sys.stderr, flush=True)
    if check.cuda:
        torch.cuda.empty_cache()
    return entry


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="run every step on the CPU at tiny shapes")
    parser.add_argument("--only", nargs="+", choices=sorted(STEPS), help="run these steps only")
    parser.add_argument("--out", type=Path, help="also write the JSON results here")
    args = parser.parse_args(argv)
    if not args.cpu and not torch.cuda.is_available():
        report: dict[str, Any] = {
            "gpu": False,
            "ok": True,
            "message": f"no GPU: torch {torch.__version__} sees no CUDA device; nothing to check "
            "(--cpu runs the steps at tiny shapes on the CPU)",
        }
        print(json.dumps(report, indent=2))
        return 0
    device = torch.device("cpu") if args.cpu else torch.device("cuda", 0)
    if device.type == "cuda":
        use_cuda_device(device)
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({os.cpu_count()} cores)"
    print(f"gpu_check on {card}", file=sys.stderr, flush=True)
    warnings.filterwarnings("ignore", category=FutureWarning)
    transformers_logging.disable_progress_bar()
    with tempfile.TemporaryDirectory(prefix="kitchen-gpu-check-") as scratch:
        check = Check(device, CPU if args.cpu else GPU, Path(scratch))
        names = args.only or list(STEPS)
        results = [run_step(check, name, STEPS[name]) for name in names]
    report = {
        "gpu": device.type == "cuda",
        "card": card,
        "ok": all(r["status"] != "failed" for r in results),
        "steps": results,
    }
    text = json.dumps(report, indent=2, default=_jsonable)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0 if report["ok"] else 1


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
