"""scripts/gpu_check.sh: without a GPU it says so and exits 0; `--cpu` runs every step at tiny
shapes and prints the JSON a GPU run prints (so the script itself is tested here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "gpu_check.sh"
STEPS = (
    "cuda",
    "attention_routes",
    "bf16_step",
    "throughput_small",
    "big_model",
    "dpo",
    "save_load",
    "sampler",
    "liger",
    "vllm",
    "fsdp_one_worker",
    "compile",
)


def _check(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_carry_list_names_the_wheels_folder() -> None:
    result = _check("--carry")
    assert result.returncode == 0 and result.stdout.split() == [".gpu_wheels"]


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the check would run")
def test_without_a_gpu_it_says_so_and_exits_0() -> None:
    result = _check()
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["gpu"] is False and report["ok"] is True and "no GPU" in report["message"]


@pytest.mark.slow
def test_cpu_mode_runs_every_step_and_reports_json(tmp_path: Path) -> None:
    out = tmp_path / "check.json"
    result = _check("--cpu", "--out", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report == json.loads(out.read_text())
    assert report["ok"] is True and report["gpu"] is False
    steps = {entry["step"]: entry for entry in report["steps"]}
    assert tuple(steps) == STEPS
    statuses = {name: entry["status"] for name, entry in steps.items()}
    assert statuses["vllm"] == "skipped" and "vLLM" in steps["vllm"]["reason"]
    assert statuses["liger"] == "skipped"  # needs CUDA
    assert all(status == "ok" for name, status in statuses.items() if name not in ("vllm", "liger", "compile"))
    routes = steps["attention_routes"]["results"]
    for route in ("flex_trie", "masked_rows", "each_alone"):
        assert routes[route]["max_abs_logprob_error"] < 1e-4
    assert routes["flex_trie"]["slots"] == routes["flex_trie"]["filled"] <= routes["masked_rows"]["slots"]
    assert steps["bf16_step"]["results"]["master_weights_changed"] > 0.99
    assert steps["fsdp_one_worker"]["results"]["full"]["relative_gap"] < 1e-3
    for setup in ("full_bf16", "lora_r32_bf16", "full_bf16_checkpointing", "full_fp32"):
        assert steps["throughput_small"]["results"][setup]["tokens_per_second"] > 0
    assert steps["sampler"]["results"]["max_abs_logprob_gap_vs_training"] < 0.05
