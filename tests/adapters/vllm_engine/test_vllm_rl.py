"""End to end: `kitchen run math_rl local.sampler=vllm` on tiny32 stays on-policy (the sampler's
logprobs are the trainer's), reports the weight sync time, keeps the engine's log in the run
directory and stops the engine with the run; `kitchen sample` on the run uses the engine too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kitchen.engine.runs.metrics import read_metrics
from tests.adapters.vllm_engine.engine_checks import SKIP_REASON
from tests.helpers import run_cli

pytest.importorskip("vllm", reason=SKIP_REASON)


def _engine_pids(log: str) -> set[int]:
    return {int(pid) for pid in re.findall(r"pid=(\d+)", log)}


def test_math_rl_with_the_vllm_sampler_is_on_policy(tmp_path: Path) -> None:
    result = run_cli(
        "run",
        "math_rl",
        "model_name=tiny32",
        "local.sampler=vllm",
        "rl.num_batches=3",
        "warm_start.steps=10",
        "rl.groups_per_batch=8",
        "eval.every=3",
        f"log_path={tmp_path}",
    )
    assert result.returncode == 0, result.stderr
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert len(rows) == 3
    assert all(row["optim/kl_sample_train_v2"] < 1e-3 for row in rows)
    assert all(row["time/weight_sync"] > 0 for row in rows)
    assert "eval/all/reward/total" in rows[-1]
    log = (tmp_path / "vllm" / "engine-0" / "engine.log").read_text()
    pids = _engine_pids(log)
    assert pids and not any(Path(f"/proc/{pid}").exists() for pid in pids)  # stopped with the run

    sampled = run_cli("sample", str(tmp_path), "--prompt", "What is 1 + 2?", "--max-tokens", "8", "--seed", "0")
    assert sampled.returncode == 0, sampled.stderr
    log = (tmp_path / "vllm" / "engine-0" / "engine.log").read_text()
    assert log.count("starting the vLLM engine") == 2
    assert not any(Path(f"/proc/{pid}").exists() for pid in _engine_pids(log))
