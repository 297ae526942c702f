"""The embedded tiny tokenizer and config: offline loading, special tokens, chat template, provenance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoTokenizer

from adapters.common.tiny import TINY32_MODEL_NAME, TINY64K_DIR, TINY_DIR
from adapters.common.tiny.build_tiny import TINY_VL_DIR, build
from train_core.renderers.special_tokens import ALL_SPECIAL_TOKENS, PAD


def test_tokenizer_loads_offline_with_about_1500_tokens_and_pad() -> None:
    tokenizer = AutoTokenizer.from_pretrained(TINY_DIR, local_files_only=True)
    assert 1400 <= len(tokenizer) <= 1600
    assert tokenizer.pad_token == PAD
    assert tokenizer.eos_token == "<|im_end|>"
    config = AutoConfig.from_pretrained(TINY_DIR, local_files_only=True)
    assert config.vocab_size == len(tokenizer)
    assert config.pad_token_id == tokenizer.pad_token_id


@pytest.mark.parametrize("special", ALL_SPECIAL_TOKENS)
def test_every_renderer_special_token_is_one_token_that_skip_special_removes(special: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(TINY_DIR)
    ids = tokenizer.encode(f"hi{special}there", add_special_tokens=False)
    assert tokenizer.convert_tokens_to_ids(special) in ids
    assert len(tokenizer.encode(special, add_special_tokens=False)) == 1
    assert tokenizer.decode(ids, skip_special_tokens=True) == "hithere"


def test_digits_are_split_and_text_round_trips() -> None:
    tokenizer = AutoTokenizer.from_pretrained(TINY_DIR)
    text = 'What is 123 + 4056? {"name": "search"} café ✓'
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    pieces = [str(tokenizer.decode([i])) for i in ids]
    digit_tokens = [piece for piece in pieces if piece.strip().isdigit()]
    assert digit_tokens == list("1234056")


def test_chat_template_is_chatml() -> None:
    tokenizer = AutoTokenizer.from_pretrained(TINY_DIR)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.slow
def test_build_script_reproduces_the_shipped_assets(tmp_path: Path) -> None:
    build(tmp_path)
    shipped = sorted(p.name for p in TINY_DIR.iterdir() if p.suffix in {".json", ".jinja"})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*shipped, TINY32_MODEL_NAME, TINY64K_DIR, TINY_VL_DIR])
    files = [*shipped, f"{TINY32_MODEL_NAME}/config.json", f"{TINY64K_DIR}/config.json"]  # configs, tiny's tokenizer
    files += [f"{TINY_VL_DIR}/config.json", f"{TINY_VL_DIR}/preprocessor_config.json"]
    for name in files:
        assert comparable(TINY_DIR / name) == comparable(tmp_path / name), name


def comparable(path: Path) -> object:
    """A built file's content, less the transformers version that wrote a config (it changes with
    every transformers release and does not change the model)."""
    if path.name != "config.json":
        return path.read_bytes()
    config = json.loads(path.read_text())
    config.pop("transformers_version", None)
    return config
