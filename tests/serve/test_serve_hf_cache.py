"""Served names in the HF cache: a vision-language model's image processor and its own config are
published beside the tokenizer, so `AutoImageProcessor.from_pretrained(name)` (the cookbook's VLM
recipes) works offline for a served name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huggingface_hub import constants
from transformers import AutoConfig, AutoImageProcessor

from adapters.common.tiny import EMBEDDED_MODELS
from adapters.noop import NoopBackend
from kitchen.apps.serve.catalog import ModelCatalog
from kitchen.apps.serve.records import RecordStore
from kitchen.apps.serve.service import TinkerService
from kitchen.engine.backends import get_backend_spec

TEXT, VISION = "Org/Text-Model", "Org/Vision-Model"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The HF cache after the server published a text and a vision-language name into it."""
    hub = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    catalog = ModelCatalog({TEXT: "tiny", VISION: "tiny-vl"})
    service = TinkerService(NoopBackend(), get_backend_spec("noop"), catalog, RecordStore(tmp_path / "store"))
    assert sorted(service.cache_tokenizers()) == [TEXT, VISION]
    return hub


def test_a_served_vision_models_image_processor_and_config_are_in_the_hf_cache(hub: Path) -> None:
    processor = AutoImageProcessor.from_pretrained(VISION, cache_dir=hub, local_files_only=True)
    own = json.loads((EMBEDDED_MODELS["tiny-vl"] / "preprocessor_config.json").read_text(encoding="utf-8"))
    assert (processor.patch_size, processor.merge_size) == (own["patch_size"], own["merge_size"])
    config = AutoConfig.from_pretrained(VISION, cache_dir=hub, local_files_only=True)
    assert config.model_type == "qwen3_vl"  # tiny-vl's own config, not the shared tokenizer folder's


def test_a_served_text_model_has_its_config_and_no_image_processor(hub: Path) -> None:
    assert AutoConfig.from_pretrained(TEXT, cache_dir=hub, local_files_only=True).model_type == "qwen3"
    with pytest.raises(OSError):
        AutoImageProcessor.from_pretrained(TEXT, cache_dir=hub, local_files_only=True)
