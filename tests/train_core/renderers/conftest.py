"""The embedded tiny tokenizer, shared by every renderer test, with the special tokens of the
formats added after it (`NEWER_SPECIAL_TOKENS`) added as single tokens."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from adapters.common.tiny import TINY_DIR
from train_core.renderers.special_tokens import NEWER_SPECIAL_TOKENS


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerBase:
    tokenizer = AutoTokenizer.from_pretrained(TINY_DIR)
    tokenizer.add_special_tokens({"additional_special_tokens": list(NEWER_SPECIAL_TOKENS)})
    return tokenizer
