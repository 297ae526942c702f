"""The embedded tiny models: tokenizer files and Qwen3 `config.json`s shipped as package data.

`tiny` is the default model; `tiny32` is a larger sibling whose attention head size (32) vLLM's
kernels support, for the vLLM rollout engine (`tiny`'s 24 is not); `tiny64k` is `tiny` with
positions for 64k tokens. All share the tokenizer.
Regenerate the assets with `python -m adapters.common.tiny.build_tiny`.
"""

from __future__ import annotations

from pathlib import Path

TINY_DIR = Path(__file__).resolve().parent
"""The directory holding the tiny model's tokenizer and config; loadable with `from_pretrained`."""

TINY_MODEL_NAME = "tiny"

TINY32_MODEL_NAME = "tiny32"

TINY64K_MODEL_NAME = "tiny64k"
"""`tiny`'s shape and weights (same seed, same tensors) with RoPE base 1e6 and positions for 65,536
tokens, for long episodes (`rl_numerics_check`); `tiny` itself stops at 2,048."""

TINY64K_DIR = "tiny64k"

TINY_VL_MODEL_NAME = "tiny-vl"
"""A tiny Qwen3-VL (vision encoder and language model) for image inputs; its tokenizer is `tiny`'s
with Qwen-VL's vision tokens added after it (`VISION_TOKENS`), its image processor Qwen3-VL's."""

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>")

EMBEDDED_MODELS: dict[str, Path] = {
    TINY_MODEL_NAME: TINY_DIR,
    TINY32_MODEL_NAME: TINY_DIR / "tiny32",
    TINY64K_MODEL_NAME: TINY_DIR / TINY64K_DIR,
    TINY_VL_MODEL_NAME: TINY_DIR / "tiny_vl",  # written by build_tiny (TINY_VL_DIR)
}
"""Embedded model names and the directory holding each one's `config.json`; the weights are
random-initialised from a fixed seed when loaded, the tokenizer is `TINY_DIR`'s."""
