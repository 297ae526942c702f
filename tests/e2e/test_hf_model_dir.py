"""A real Hugging Face model directory (saved with save_pretrained) trains by path, with and
without LoRA, through the same recipe as the embedded model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from adapters.common.tiny import TINY_DIR
from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.metrics import read_metrics


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hf-model")
    config = AutoConfig.from_pretrained(TINY_DIR)
    config.intermediate_size = 128  # differs from the embedded model: this is another model
    torch.manual_seed(123)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(TINY_DIR).save_pretrained(path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("lora", [None, 8])
def test_sl_basic_on_a_model_dir(model_dir: Path, lora: int | None, tmp_path: Path) -> None:
    recipe = get_recipe("sl_basic")
    overrides = [
        f"model_name={model_dir}",
        "data.max_steps=8",
        "data.batch_size=16",
        "eval.every=0",
        "checkpoint.save_every=4",
        "optimizer.learning_rate=5e-3",
        f"log_path={tmp_path}",
    ]
    if lora:
        overrides.append(f"lora_rank={lora}")
    run_dir = run_recipe(recipe, load_config(recipe.config_cls, None, overrides), progress=False)
    nll = [row["train_mean_nll"] for row in read_metrics(run_dir.metrics)]
    assert len(nll) == 8 and nll[-1] < nll[0]
    assert (tmp_path / "checkpoints" / "weights" / "final").exists()
