"""Reading a JSONL data set (SFT records, RL prompts) takes memory independent of its size:
records come from the file's Arrow cache a batch at a time (kitchen.jsonl_cache). Measured as the
peak RSS of a subprocess that reads every record, for a file 8 times larger than another (no
timing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kitchen.datasets import load_located_records
from kitchen.jsonl_cache import CACHE_ENV, cached_jsonl

READ_ALL = """
import resource, sys
from kitchen.datasets import load_located_records
from kitchen.supervised.stages import RecordDatums
records = load_located_records(sys.argv[1], required_any=[["prompt"]])
total = sum(len(record["completion"]) for _, record in records)
lazy = RecordDatums(records, range(len(records)), lambda where, record: record)
assert lazy[len(lazy) - 1]["prompt"].startswith("question")
from recipes.reward_fn_rl import load_prompt_records  # RL prompts: checked, then read lazily
from train_core.renderers.messages import STANDARD_ROLES
prompts = load_prompt_records(sys.argv[1], "train", STANDARD_ROLES)
assert prompts[len(prompts) - 1].messages[0]["content"].startswith("question")
assert prompts.with_completions() is not None
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, total)
"""


def _write(path: Path, records: int) -> Path:
    with path.open("w") as handle:
        for index in range(records):
            handle.write(json.dumps({"prompt": f"question {index} " + "x" * 600, "completion": "y" * 1400}) + "\n")
    return path


def _peak_rss_kib(path: Path, cache: Path) -> int:
    env = {**os.environ, CACHE_ENV: str(cache), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", READ_ALL, str(path)], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    rss, total = map(int, done.stdout.split())
    assert total == 1400 * sum(1 for _ in path.open())
    return rss


@pytest.mark.slow  # two interpreters reading 4 and 32 MB
def test_peak_rss_does_not_grow_with_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = _write(tmp_path / "small.jsonl", 2_000)  # 4 MB
    big = _write(tmp_path / "big.jsonl", 16_000)  # 32 MB
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    cached_jsonl(small), cached_jsonl(big)  # converted here first: the reads below are measured
    growth_kib = _peak_rss_kib(big, tmp_path / "cache") - _peak_rss_kib(small, tmp_path / "cache")
    # Reading the whole file into memory as before grew RSS by several times the 28 MB difference.
    assert growth_kib < 8 * 1024, f"peak RSS grew by {growth_kib / 1024:.1f} MB for 28 MB more data"


def test_records_read_back_exactly_with_their_lines(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1.0, "b": [1, "x"]}\n\n{"a": 2}\n')
    records = load_located_records(str(path))
    assert list(records) == [(f"{path} line 1", {"a": 1.0, "b": [1, "x"]}), (f"{path} line 3", {"a": 2})]
    assert records[-1] == records[1] and records[0:1] == [records[0]] and len(records) == 2


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n')
    assert [r for _, r in load_located_records(str(path))] == [{"a": 1}]
    path.write_text('{"a": 2}\n{"a": 3}\n')
    assert [r for _, r in load_located_records(str(path))] == [{"a": 2}, {"a": 3}]
