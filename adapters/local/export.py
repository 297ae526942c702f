"""Export a local-backend checkpoint as a Hugging Face model directory.

Full fine-tunes become a plain `AutoModelForCausalLM` directory (`config.json`, safetensors weights,
tokenizer files and chat template). LoRA runs become a PEFT adapter directory (`adapter_config.json`
+ `adapter_model.safetensors`) that `PeftModel.from_pretrained` loads on top of the base model, or,
with `merge_lora`, merged full weights. The embedded tiny model has no files of its own on the hub,
so an unmerged tiny adapter ships its base model in `<out>/base_model/`.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging as hf_logging

from adapters.common.tiny import EMBEDDED_MODELS
from adapters.common.tokenizer import load_tokenizer
from adapters.local.checkpoint_io import load_weights, read_identity
from adapters.local.model_loading import LoraOptions, load_base_model, load_model
from kitchen.engine.errors import ConfigError


def export_hf(
    checkpoint: str, out_dir: Path, merge_lora: bool = False, lora: LoraOptions | None = None
) -> dict[str, Any]:
    """Write the model of `checkpoint` (a `save_state` or `save_weights_for_sampler` directory) to
    `out_dir`; returns what was written (kitchen records it in `kitchen_export.json`). `lora`: the adapters'
    alpha and target modules as the run trained them (its `local` section); the adapter config
    and the merged weights follow them."""
    path = Path(checkpoint)
    identity = read_identity(path)
    if merge_lora and identity.lora_rank is None:
        raise ConfigError(f"{path}: --merge-lora given, but this checkpoint is a full fine-tune (no LoRA)")
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ConfigError(f"export directory {out_dir} exists and is not empty")
    model: Any = load_model(
        identity.base_model, identity.lora_rank, identity.seed, torch.device("cpu"), lora=lora, layers=identity.layers
    )
    load_weights(path, model)
    tokenizer: Any = load_tokenizer(identity.base_model)
    out_dir.mkdir(parents=True, exist_ok=True)
    hf_logging.disable_progress_bar()
    info: dict[str, Any] = {
        "checkpoint": str(path.resolve()),
        "base_model": identity.base_model,
        "lora_rank": identity.lora_rank,
    }
    if lora is not None and identity.lora_rank is not None:
        targets = lora.target_modules
        info["lora_alpha"] = lora.alpha
        info["lora_target_modules"] = targets if isinstance(targets, str) else list(targets)
    if identity.layers is not None:
        info["lora_layers"] = asdict(identity.layers)
    if identity.lora_rank is None:
        info["format"] = "full"
        model.save_pretrained(out_dir, safe_serialization=True)
    elif merge_lora:
        info["format"] = "merged"
        model.merge_and_unload().save_pretrained(out_dir, safe_serialization=True)
    else:
        info["format"] = "peft_adapter"
        model.save_pretrained(out_dir, safe_serialization=True)
        base = identity.base_model
        if base in EMBEDDED_MODELS:
            base_dir = out_dir / "base_model"
            base_model: Any = load_base_model(base, torch.float32)
            base_model.save_pretrained(base_dir, safe_serialization=True)
            tokenizer.save_pretrained(base_dir)
            base = str(base_dir.resolve())
        _set_adapter_base(out_dir, base)
        info["adapter_base_model"] = base
    tokenizer.save_pretrained(out_dir)
    return info


def _set_adapter_base(out_dir: Path, base: str) -> None:
    config_file = out_dir / "adapter_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = base
    config_file.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
