"""Bits per byte beside NLL: the `nll` eval task and the supervised held-out `eval/nll` report
the same NLL per UTF-8 byte of the scored text, a character the tokenizer splits counted once."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest

from adapters.common.tokenizer import load_tokenizer
from adapters.noop import NoopBackend
from kitchen.engine.config.loading import load_config
from kitchen.engine.eval_tasks import EvalModel, get_task
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.metrics import read_metrics
from train_core.renderers.registry import get_renderer
from train_core.types import ModelInput

COMPLETIONS = (" café au lait", " 12 + 30 = 42", " naïve ☕")
"""The tiny model's byte-level tokenizer splits é, ï and ☕ across tokens."""


class CoinSampler:
    """A model that gives every token probability 1/2 (one bit), so the NLL per byte is the
    scored tokens over the bytes they spell: no model that runs here has a known likelihood."""

    async def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        return [None] + [-math.log(2)] * (prompt.length - 1)


def test_nll_task_reports_bits_per_byte_of_the_scored_text(tmp_path: Path) -> None:
    data = tmp_path / "held_out.jsonl"
    data.write_text("".join(json.dumps({"prompt": "Q:", "completion": c}) + "\n" for c in COMPLETIONS))
    tokenizer = load_tokenizer("tiny")

    async def no_other_model(name: str) -> Any:
        raise AssertionError(name)

    model = EvalModel(
        CoinSampler(),  # type: ignore[arg-type]
        get_renderer("role_colon", tokenizer),
        tokenizer,
        "coin",
        no_other_model,
        None,
        {},
        lambda _: tokenizer,
    )
    spec = get_task("nll")
    result = asyncio.run(spec.evaluate(model, spec.settings.model_validate({"dataset": str(data)})))
    assert [s.extra["bytes"] for s in result.samples] == [len(c.encode("utf-8")) for c in COMPLETIONS]
    tokens = sum(s.extra["tokens"] for s in result.samples)
    assert result.metrics["nll"].value == pytest.approx(math.log(2))
    bits_per_byte = result.metrics["bits_per_byte"]
    assert bits_per_byte.value == pytest.approx(tokens / sum(len(c.encode("utf-8")) for c in COMPLETIONS))
    assert bits_per_byte.n == 3 and bits_per_byte.stderr is not None and bits_per_byte.stderr > 0


def test_supervised_held_out_bits_per_byte_beside_nll(tmp_path: Path) -> None:
    recipe = get_recipe("sl_basic")
    overrides = ["backend=noop", f"log_path={tmp_path}", "data.max_steps=4", "eval.every=2", "data.batch_size=8"]
    config = load_config(recipe.config_cls, None, overrides)
    backend = NoopBackend(seed=config.seed, checkpoint_dir=tmp_path / "checkpoints")
    rows = read_metrics(run_recipe(recipe, config, progress=False, backend=backend).metrics)
    evals = [row for row in rows if "eval/nll" in row]
    assert len(evals) >= 2 and all(row["eval/bits_per_byte"] > 0 for row in evals)
    # the held-out set is fixed, so bits per byte is the NLL times one constant (tokens / bytes / ln 2)
    ratios = [row["eval/bits_per_byte"] / row["eval/nll"] for row in evals]
    assert ratios == pytest.approx([ratios[0]] * len(ratios), rel=1e-6)
    assert 0 < ratios[0] * math.log(2) <= 1  # a token of this tokenizer spells at least one byte
