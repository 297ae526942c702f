"""`chat_sl renderer=<name>` trains the embedded tiny model through the renderers of the original
families and two of the newer ones (their other formats are covered by the renderer property and
template tests, their architectures by tests/adapters/local/test_local_architectures.py; one run
each would add minutes to the slow tier)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.metrics import read_metrics
from tests.train_core.renderers.renderer_cases import NEWER_FAMILIES
from train_core.renderers.registry import renderer_names

# GLM-5.3's and TMLv0's special tokens are not in the tiny tokenizer (train_core.renderers.special_tokens)
NOT_ON_TINY = (*NEWER_FAMILIES, "glm5_3", "tml_v0")
ON_TINY = [n for n in renderer_names() if not n.startswith(NOT_ON_TINY)] + ["qwen3_5", "kimi_k25"]


@pytest.mark.slow
@pytest.mark.parametrize("renderer", ON_TINY)
def test_chat_sl_trains_with_renderer(renderer: str, tmp_path: Path) -> None:
    recipe = get_recipe("chat_sl")
    overrides = [
        f"renderer={renderer}",
        "data.max_steps=6",
        "data.batch_size=8",
        "eval.every=0",
        "checkpoint.save_every=0",
        "optimizer.learning_rate=3e-3",
        "optimizer.lr_schedule=constant",
        f"log_path={tmp_path}",
    ]
    run_dir = run_recipe(recipe, load_config(recipe.config_cls, None, overrides), progress=False)
    rows = read_metrics(run_dir.metrics)
    nll = [row["train_mean_nll"] for row in rows]
    assert len(nll) == 6 and all(math.isfinite(x) for x in nll)
    assert (nll[-1] + nll[-2]) / 2 < nll[0], f"{renderer}: NLL did not fall ({nll})"
