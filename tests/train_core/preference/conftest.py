"""Fixtures for the preference tests: the real role_colon renderer on the embedded tiny tokenizer."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from adapters.common.tiny import TINY_DIR
from train_core.renderers.base import Renderer
from train_core.renderers.registry import get_renderer


@pytest.fixture(scope="session")
def tiny_tokenizer() -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(TINY_DIR)


@pytest.fixture(scope="session")
def role_colon(tiny_tokenizer: PreTrainedTokenizerBase) -> Renderer:
    return get_renderer("role_colon", tiny_tokenizer)
