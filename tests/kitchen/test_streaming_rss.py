"""Reading a data set (SFT records, RL prompts, math and code problems; JSONL, parquet or a
`datasets.save_to_disk` folder) takes memory independent of its size: records come from the
source's Arrow cache a batch at a time (kitchen.engine.runs.record_cache). Measured as the peak RSS of a
subprocess that reads every record (the high-water mark reset after its imports, whose own peak
would hide a smaller growth), for files 8 times larger than others (no timing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kitchen.engine.runs.datasets import load_located_records
from kitchen.engine.runs.record_cache import CACHE_ENV, cached_jsonl

PEAK = """
def reset_peak():  # Linux: writing 5 to clear_refs resets VmHWM to the current RSS
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
def peak_kib():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
"""
READ_ALL = (
    PEAK
    + """
import sys
import pyarrow.parquet, datasets  # imported before the reset, as the loaders would import them
from kitchen.engine.runs.datasets import BuiltRecords, load_located_records
from kitchen.families.rl.reward_env import load_prompt_records
from train_core.renderers.messages import STANDARD_ROLES
reset_peak()
records = load_located_records(sys.argv[1], required_any=[["prompt"]])
total = sum(len(record["completion"]) for _, record in records)
lazy = BuiltRecords(records, lambda where, record: record)
assert lazy[len(lazy) - 1]["prompt"].startswith("question")
prompts = load_prompt_records(sys.argv[1], "train", STANDARD_ROLES)  # RL prompts: checked, then read lazily
assert prompts[len(prompts) - 1].messages[0]["content"].startswith("question")
assert prompts.with_completions() is not None
print(peak_kib(), total)
"""
)


def _write(path: Path, records: int) -> Path:
    with path.open("w") as handle:
        for index in range(records):
            handle.write(json.dumps({"prompt": f"question {index} " + "x" * 600, "completion": "y" * 1400}) + "\n")
    return path


def _run(script: str, path: Path, cache: Path) -> tuple[int, int]:
    """(peak RSS in KiB while reading, the total the script printed) of `script` reading `path` in a
    subprocess."""
    env = {**os.environ, CACHE_ENV: str(cache), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    rss, total = map(int, done.stdout.split())
    return rss, total


def _peak_rss_kib(path: Path, cache: Path) -> int:
    rss, total = _run(READ_ALL, path, cache)
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


def test_records_read_in_any_order_across_cache_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Indexing decodes one row of the cached batch it falls in: a shuffled order jumping between
    batches gets each record with its own location (JSONL line, parquet record number)."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    from kitchen.engine.runs import record_cache

    monkeypatch.setattr(record_cache, "ROWS_PER_BATCH", 4)  # 11 rows: three batches in each cache
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("".join(f'{{"i": {i}}}\n' + ("\n" if i == 5 else "") for i in range(11)))
    parquet = tmp_path / "d.parquet"
    pq.write_table(pa.table({"i": list(range(11))}), parquet, row_group_size=4)
    for source, where in (
        (jsonl, lambda i: f"{jsonl} line {i + 1 + (i > 5)}"),
        (parquet, lambda i: f"{parquet} record {i + 1}"),
    ):
        records = load_located_records(str(source))
        assert records.__class__.__name__ == "CachedRecords" and len(records) == 11
        order = list(range(11)) * 2
        random.Random(0).shuffle(order)
        assert [records[i] for i in order] == [(where(i), {"i": i}) for i in order]
        assert list(records) == [(where(i), {"i": i}) for i in range(11)]


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n')
    assert [r for _, r in load_located_records(str(path))] == [{"a": 1}]
    path.write_text('{"a": 2}\n{"a": 3}\n')
    assert [r for _, r in load_located_records(str(path))] == [{"a": 2}, {"a": 3}]


READ_OTHER_SOURCES = (
    PEAK
    + """
import sys
import pyarrow.parquet, datasets  # imported before the reset, as the loaders would import them
from kitchen.engine.runs.datasets import load_located_records
from recipes.envs.code import load_code_problems
from recipes.envs.gsm8k import load_word_problems
reset_peak()
folder = sys.argv[1]
total = 0
for source in (folder + "/sft.parquet", folder + "/saved"):
    total += sum(len(record["completion"]) for _, record in load_located_records(source, required_any=[["prompt"]]))
code = load_code_problems(folder + "/code.jsonl")  # every problem checked, then parsed again when used
total += sum(len(problem.solution) for problem in code)
math = load_word_problems(folder + "/gsm8k.jsonl")
total += sum(1400 for problem in math if problem.answer.isdigit())
print(peak_kib(), total)
"""
)


def _write_other_sources(folder: Path, records: int) -> Path:
    """A parquet file, a save_to_disk folder, a code and a GSM8K problem file of `records` each."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir()
    rows = {"prompt": [f"question {i} " + "x" * 600 for i in range(records)], "completion": ["y" * 1400] * records}
    pq.write_table(pa.table(rows), folder / "sft.parquet", row_group_size=4096)
    datasets.Dataset.from_dict(rows).save_to_disk(str(folder / "saved"))
    with (folder / "code.jsonl").open("w") as code, (folder / "gsm8k.jsonl").open("w") as math:
        for index in range(records):
            case = {"input": str(index), "output": str(index + 3)}
            problem = {"problem": f"Add three to {index}. " + "x" * 600, "tests": [case], "solution": "y" * 1400}
            code.write(json.dumps(problem) + "\n")
            answer = "z" * 1392 + f" #### {index}"
            math.write(json.dumps({"question": f"What is {index}? " + "x" * 600, "answer": answer}) + "\n")
    return folder


@pytest.mark.slow  # two interpreters reading 4 x 4 MB and 4 x 32 MB
def test_peak_rss_does_not_grow_with_parquet_saved_datasets_or_rl_problem_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = _write_other_sources(tmp_path / "small", 2_000)
    big = _write_other_sources(tmp_path / "big", 16_000)
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    for folder in (small, big):  # converted here first: the reads below are measured
        for source in ("sft.parquet", "saved", "code.jsonl", "gsm8k.jsonl"):
            load_located_records(str(folder / source))
    (small_rss, small_total), (big_rss, big_total) = (_run(READ_OTHER_SOURCES, f, cache) for f in (small, big))
    assert (small_total, big_total) == (4 * 1400 * 2_000, 4 * 1400 * 16_000)
    # Materializing the records, as before, grew RSS by well over the 4 x 28 MB difference.
    growth_kib = big_rss - small_rss
    assert growth_kib < 16 * 1024, f"peak RSS grew by {growth_kib / 1024:.1f} MB for 112 MB more data"
