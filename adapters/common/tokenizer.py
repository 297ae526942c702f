"""Tokenizer loading for the in-process backends: the embedded tiny model's, a local path's, or a
hub name's from the HF cache."""

from __future__ import annotations

from functools import lru_cache
from typing import cast

from transformers import AutoTokenizer

from adapters.common.tiny import EMBEDDED_MODELS, TINY_DIR, TINY_VL_MODEL_NAME, VISION_TOKENS
from kitchen.engine.errors import ConfigError
from kitchen.engine.ports import Tokenizer


def model_dir(base_model: str) -> str:
    """Where `from_pretrained` finds `base_model`'s tokenizer: the shipped tiny assets for an
    embedded model ("tiny", "tiny32")."""
    return str(TINY_DIR) if base_model in EMBEDDED_MODELS else base_model


@lru_cache(maxsize=8)
def load_tokenizer(base_model: str) -> Tokenizer:
    """The tokenizer of `base_model` ("tiny", a local path, or a hub name in the HF cache)."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir(base_model))
        if base_model == TINY_VL_MODEL_NAME:  # ids 1500.. of tiny's 1500-token vocabulary
            tokenizer.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)})
        if base_model in EMBEDDED_MODELS:
            # The model's own folder (its config, tiny-vl's image processor), not the shared
            # tokenizer's: serve publishes those files beside the tokenizer under a served name.
            tokenizer.name_or_path = str(EMBEDDED_MODELS[base_model])
        # transformers' decode is wider than the port's (it also takes batches), hence the cast.
        return cast(Tokenizer, tokenizer)
    except OSError as exc:
        raise ConfigError(f"model_name {base_model!r}: cannot load its tokenizer ({exc})") from exc
