"""Models the local-backend benchmarks build: the embedded tiny model, or a ~32M- or ~50M-parameter
random-weight Qwen3-architecture model saved (with the tiny tokenizer) into a scratch directory,
so the local backend loads it by path like any HF model."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig

from adapters.common.tiny import EMBEDDED_MODELS, TINY_DIR

QWEN3_50M = {
    "hidden_size": 640,
    "intermediate_size": 1792,
    "num_hidden_layers": 10,
    "num_attention_heads": 10,
    "num_key_value_heads": 5,
    "head_dim": 64,
}
"""With the tiny tokenizer's 1500-token vocabulary: about 50M parameters."""

QWEN3_32M = {
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 10,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 64,
}
"""With the tiny tokenizer's 1500-token vocabulary: about 32M parameters."""

QWEN3_BIG_VOCAB = {
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 151_936,
}
"""A small body under Qwen's 151,936-token vocabulary (39M parameters, nearly all of them the tied
embedding): the logits, not the body, set its training memory."""

QWEN3_0_6B = {
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151_936,
    "max_position_embeddings": 8192,
}
"""Qwen3-0.6B's shape (tied embeddings, 0.6B parameters), random weights: the GPU benchmarks' model."""

SIZES = {"32m": QWEN3_32M, "50m": QWEN3_50M, "big-vocab": QWEN3_BIG_VOCAB, "0.6b": QWEN3_0_6B}


def build_qwen3_50m(directory: Path, seed: int = 0) -> str:
    """Write the 50M model and the tiny tokenizer into `directory`; return it as a model name."""
    return build_qwen3(directory, "50m", seed)


def build_qwen3(directory: Path, size: str, seed: int = 0) -> str:
    """Write the `size` model (a key of SIZES) and the tiny tokenizer into `directory`; return it as a model name."""
    config = AutoConfig.from_pretrained(TINY_DIR)
    for key, value in SIZES[size].items():
        setattr(config, key, value)
    config.layer_types = ["full_attention"] * config.num_hidden_layers
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (TINY_DIR / name).exists():
            shutil.copy(TINY_DIR / name, directory / name)
    return str(directory)


def model_name(size: str, scratch: Path) -> str:
    """An embedded model's name (`tiny`, `tiny32`) as it is, or a path to the freshly built model of
    that size (a key of SIZES)."""
    if size in EMBEDDED_MODELS:
        return size
    return build_qwen3(scratch / f"qwen3-{size}", size)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 125.0, "L4": 121.0}
"""Dense bfloat16 tensor-core peaks from the vendor's data sheets (SXM parts), by card name."""


def peak_bf16_tflops(card: str) -> float | None:
    """The card's dense bfloat16 peak (by a name `torch.cuda.get_device_name` contains), if on file."""
    return next((tflops for name, tflops in PEAK_BF16_TFLOPS.items() if name in card), None)


def training_flops_per_token(model: str | PretrainedConfig, context: float) -> float:
    """Model FLOPs of one trained token (forward and backward): 6 x the matmul parameters (every
    layer's projections and the output head) + the causal attention's 6 x layers x width x context."""
    c = AutoConfig.from_pretrained(model) if isinstance(model, str) else model
    attention_width = c.num_attention_heads * c.head_dim
    kv_width = c.num_key_value_heads * c.head_dim
    per_layer = c.hidden_size * (2 * attention_width + 2 * kv_width) + 3 * c.hidden_size * c.intermediate_size
    matmul_parameters = c.num_hidden_layers * per_layer + c.hidden_size * c.vocab_size
    return 6.0 * matmul_parameters + 6.0 * c.num_hidden_layers * attention_width * context
