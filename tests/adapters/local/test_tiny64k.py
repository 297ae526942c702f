"""`tiny64k`: tiny's shape and weights with positions for 64k tokens and a RoPE base whose slowest
rotation does not wrap inside them."""

from __future__ import annotations

import math

import torch
from transformers import AutoConfig

from adapters.common.tiny import EMBEDDED_MODELS, TINY64K_MODEL_NAME, TINY_MODEL_NAME
from adapters.local.model_loading import load_base_model
from train_core.renderers.registry import recommended_renderer


def slowest_rotation(name: str) -> float:
    """Positions per turn of the slowest rotary pair: 2 pi theta^((d - 2) / d)."""
    config = AutoConfig.from_pretrained(EMBEDDED_MODELS[name])
    theta = config.rope_parameters["rope_theta"]
    return 2 * math.pi * theta ** ((config.head_dim - 2) / config.head_dim)


def test_tiny64k_has_64k_positions_and_no_rotary_pair_wraps_inside_them() -> None:
    long = AutoConfig.from_pretrained(EMBEDDED_MODELS[TINY64K_MODEL_NAME])
    short = AutoConfig.from_pretrained(EMBEDDED_MODELS[TINY_MODEL_NAME])
    assert long.max_position_embeddings == 65536 == 32 * short.max_position_embeddings
    assert slowest_rotation(TINY_MODEL_NAME) < long.max_position_embeddings  # ~29k: tiny's base would alias
    assert slowest_rotation(TINY64K_MODEL_NAME) > 16 * long.max_position_embeddings
    assert recommended_renderer(TINY64K_MODEL_NAME) == recommended_renderer(TINY_MODEL_NAME)


def test_tiny64k_has_tinys_weights() -> None:
    long = load_base_model(TINY64K_MODEL_NAME, torch.float32).state_dict()
    short = load_base_model(TINY_MODEL_NAME, torch.float32).state_dict()
    assert sorted(long) == sorted(short)
    assert all(torch.equal(long[name], short[name]) for name in short)
