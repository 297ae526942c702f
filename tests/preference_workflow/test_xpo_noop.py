"""The XPO recipe end to end on the noop backend (wiring, metrics, evaluation) and its config's
refusals of the `dpo` keys XPO does not read."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.metrics import read_metrics
from recipes.xpo import Config as XPOConfig

SMALL = ["backend=noop", "data.max_steps=3", "data.batch_size=4", "eval.every=2", "win_rate.prompts=4"]


def test_xpo_runs_on_noop_and_logs_both_terms(tmp_path: Path) -> None:
    recipe = get_recipe("xpo")
    config = load_config(recipe.config_cls, None, [f"log_path={tmp_path}", *SMALL, "xpo.alpha=0.5"])
    rows = read_metrics(run_recipe(recipe, config, progress=False).metrics)
    assert [row["step"] for row in rows] == [0, 1, 2]
    for row in rows:
        assert row["num_pairs"] == 4 and row["num_tokens"] > 0
        assert 0.0 <= row["online/policy_chosen"] <= 1.0 and 0.0 <= row["online/tie_rate"] <= 1.0
        # the loss is the mean DPO term plus the mean exploration term, which is alpha * log pi(y~) <= 0
        assert row["xpo/exploration"] <= 0.0
        assert math.isclose(row["dpo_loss"], row["xpo/dpo_loss"] + row["xpo/exploration"], rel_tol=1e-5, abs_tol=1e-6)
    assert [row["step"] for row in rows if "eval/win_rate" in row] == [1, 2]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("dpo.loss_type=hinge", "dpo.loss_type hinge: XPO's DPO term is one of sigmoid, ipo"),
        ("dpo.ld_alpha=0.5", "dpo.ld_alpha: XPO reads only dpo.beta and dpo.loss_type"),
        ("dpo.sync_ref_model=true", "dpo.sync_ref_model: XPO reads only"),
        ("xpo.alpha=-1", "xpo.alpha"),
    ],
)
def test_xpo_refuses_what_it_would_ignore(tmp_path: Path, override: str, message: str) -> None:
    recipe = get_recipe("xpo")
    with pytest.raises(ConfigError, match=message):
        load_config(recipe.config_cls, None, [f"log_path={tmp_path}", "backend=noop", override])


def test_xpo_accepts_ipo(tmp_path: Path) -> None:
    config = load_config(XPOConfig, None, [f"log_path={tmp_path}", "dpo.loss_type=ipo", "dpo.beta=0.2"])
    assert config.dpo.loss_types == ["ipo"] and config.dpo.beta == 0.2
