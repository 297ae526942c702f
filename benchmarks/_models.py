"""Models the local-backend benchmarks build: the embedded tiny model, or a ~32M- or ~50M-parameter
random-weight Qwen3-architecture model saved (with the tiny tokenizer) into a scratch directory,
so the local backend loads it by path like any HF model."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from adapters.common.tiny import TINY_DIR

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

SIZES = {"32m": QWEN3_32M, "50m": QWEN3_50M}


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
    """`tiny` or a path to the freshly built 32M or 50M model."""
    if size == "tiny":
        return "tiny"
    return build_qwen3(scratch / f"qwen3-{size}", size)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
