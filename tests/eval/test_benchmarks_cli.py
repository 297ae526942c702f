"""Every benchmark by name through the CLI on the embedded tiny model (`kitchen eval tiny --base
--tasks NAME`), its data served by the real loaders from the offline Hugging Face cache made of
its fixture (HF_HUB_OFFLINE=1): the whole path from the hub name to results.json runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.eval.hf_offline import offline_hf

JUDGED = ("alpacaeval2_lc", "arena_hard")
BENCHMARKS = (
    *("gsm8k", "math500", "aime24", "aime25", "gpqa_diamond", "mmlu_pro", "ifeval"),
    *("humaneval_plus", "mbpp_plus", "livecodebench", "bfcl", *JUDGED),
)


@pytest.fixture(scope="module")
def hf_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return offline_hf(tmp_path_factory.mktemp("hf"))


@pytest.mark.slow
@pytest.mark.parametrize("task", BENCHMARKS)
def test_benchmark_runs_by_name_on_the_tiny_model(task: str, hf_env: dict[str, str], tmp_path: Path) -> None:
    args = [task, "--limit", "2", "--max-tokens", "8", "--out", str(tmp_path / "out")]
    if task in JUDGED:
        args += [f"{task}.judge=tiny", f"{task}.judge_max_tokens=8"]
    if task in ("humaneval_plus", "mbpp_plus", "livecodebench"):
        args += [f"{task}.sandbox=process"]
    done = subprocess.run(
        [sys.executable, "-m", "kitchen", "eval", "tiny", "--base", "--tasks", *args],
        env={**os.environ, **hf_env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    rows = [row for row in results["results"] if row["task"] == task]
    lines = (tmp_path / "out" / "samples" / f"{task}.jsonl").read_text().splitlines()
    samples = [json.loads(line) for line in lines]
    # --limit 2, one sample per item: every item graded once (a fixture may hold only one)
    assert 1 <= len(samples) <= 2 and sorted(s["item"] for s in samples) == list(range(len(samples)))
    assert all(isinstance(s["grade"], float) and s["reason"] for s in samples), samples
    assert rows, results["results"]
    if task == "arena_hard":  # the tiny judge writes no verdict: such a question is left out, as upstream
        judged = sum(not s["reason"].startswith("no verdict") for s in samples)
        assert [row["n"] for row in rows] == [judged], rows
    else:
        assert all(row["n"] >= 1 for row in rows), rows


@pytest.mark.slow
def test_a_benchmark_with_a_thinking_budget_on_the_tiny_model(hf_env: dict[str, str], tmp_path: Path) -> None:
    """math500 on the tiny model, whose deepseekv3_thinking prompt opens a think block: no reply
    thinks more than the budget, and each is still graded."""
    args = ["--tasks", "math500", "--limit", "2", "--samples", "2", "--max-tokens", "16", "--thinking-budget", "6"]
    args += ["--renderer", "deepseekv3_thinking", "--out", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-m", "kitchen", "eval", "tiny", "--base", *args],
        env={**os.environ, **hf_env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = (tmp_path / "out" / "samples" / "math500.jsonl").read_text().splitlines()
    samples = [json.loads(line) for line in lines]
    assert len(samples) == 4
    assert all(s["thinking_tokens"] <= 6 and s["tokens"] <= 16 and s["reason"] for s in samples), samples
    assert all(s["thinking_tokens"] == 6 for s in samples if s["budget_forced"])
    metrics = {row["metric"] for row in json.loads((tmp_path / "out" / "results.json").read_text())["results"]}
    assert {"accuracy", "thinking_tokens", "budget_forced", "tokens"} <= metrics
