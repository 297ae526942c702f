"""The Nash-MD recipe end to end on the noop backend (wiring, metrics, evaluation), its config's
refusals of what it would ignore, and `kitchen validate`'s refusal on a backend that samples no
geometric mixtures (tinker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.metrics import read_metrics
from kitchen.engine.validation import validate_recipe
from recipes.nash_md import Config as NashMDConfig

SMALL = ["backend=noop", "data.max_steps=3", "data.batch_size=4", "eval.every=2", "win_rate.prompts=4"]


def test_nash_md_runs_on_noop_and_logs_both_terms(tmp_path: Path) -> None:
    recipe = get_recipe("nash_md")
    config = load_config(recipe.config_cls, None, [f"log_path={tmp_path}", *SMALL, "nash_md.mixture_coef=0.25"])
    assert isinstance(config, NashMDConfig) and config.nash_md.mixture_coef == 0.25
    rows = read_metrics(run_recipe(recipe, config, progress=False).metrics)
    assert [row["step"] for row in rows] == [0, 1, 2]
    for row in rows:
        assert row["num_tokens"] > 0 and row["online/reply_tokens"] > 0
        assert 0.0 <= row["online/win_probability"] <= 1.0 and 0.0 <= row["online/tie_rate"] <= 1.0
        assert row["nash_md/probability"] == pytest.approx(row["online/win_probability"])
    # The policy starts as the reference: the KL estimate of the first step is 0.
    assert rows[0]["nash_md/kl"] == pytest.approx(0.0, abs=1e-6)
    assert [row["step"] for row in rows if "eval/win_rate" in row] == [1, 2]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("dpo.loss_type=ipo", "dpo.loss_type: Nash-MD reads only dpo.beta"),
        ("dpo.sync_ref_model=true", "dpo.sync_ref_model: Nash-MD reads only dpo.beta"),
        ("nash_md.mixture_coef=1.5", "nash_md.mixture_coef"),
        ("sampling.temperature=0", "sampling.temperature"),
    ],
)
def test_nash_md_refuses_what_it_would_ignore(tmp_path: Path, override: str, message: str) -> None:
    recipe = get_recipe("nash_md")
    with pytest.raises(ConfigError, match=message):
        load_config(recipe.config_cls, None, [f"log_path={tmp_path}", "backend=noop", override])


def test_validate_refuses_a_backend_without_mixture_sampling(tmp_path: Path) -> None:
    recipe = get_recipe("nash_md")
    config = load_config(recipe.config_cls, None, [f"log_path={tmp_path}", "backend=tinker", "lora_rank=8"])
    with pytest.raises(
        ConfigError, match=r"backend 'tinker' cannot run recipe 'nash_md'.*SamplingClient\.sample_mixture"
    ):
        validate_recipe(recipe, config)
    validate_recipe(recipe, load_config(recipe.config_cls, None, [f"log_path={tmp_path}", "backend=noop"]))
