"""The embedded tiny tokenizer, shared by every renderer test (it carries all special tokens)."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from adapters.common.tiny import TINY_DIR


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(TINY_DIR)
