"""The embedded tiny model: tokenizer files and a Qwen3 `config.json` shipped as package data.

Regenerate the assets with `python -m adapters.common.tiny.build_tiny`.
"""

from __future__ import annotations

from pathlib import Path

TINY_DIR = Path(__file__).resolve().parent
"""The directory holding the tiny model's tokenizer and config; loadable with `from_pretrained`."""

TINY_MODEL_NAME = "tiny"
