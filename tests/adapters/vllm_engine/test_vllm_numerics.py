"""rl_numerics_check with the vLLM sampler (`local.sampler=vllm`) on tiny32 (tiny64k's head size,
24, is not one vLLM's kernels take; tiny32 has 2,048 positions): the trainer's logprobs against
vLLM's on every turn of a many-turn episode. vLLM computes in its own kernels, so agreement is
measured and bounded (mean squared difference as the on-policy vLLM RL test bounds it), and the
per-token worst case is reported, not held to the float32 local tolerance."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.engine.runs.metrics import read_metrics
from tests.adapters.vllm_engine.engine_checks import SKIP_REASON
from tests.helpers import run_cli

pytest.importorskip("vllm", reason=SKIP_REASON)


def test_numerics_check_with_the_vllm_sampler_measures_every_turn(tmp_path: Path) -> None:
    result = run_cli(
        "run",
        "rl_numerics_check",
        "model_name=tiny32",
        "local.sampler=vllm",
        "env.num_pages=4",
        "env.page_words=150",
        "rl.group_size=2",
        "checkpoint.save_every=0",
        f"log_path={tmp_path}",
    )
    assert result.returncode == 0, result.stderr
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert len(rows) == 2
    for row in rows:
        assert row["numerics/turns"] == 5
        assert row["num_datums"] == 2
        assert row["numerics/kl_v2"] < 1e-3
        assert row["numerics/max_abs_diff"] >= 0
