"""Bad comparison data: unusable comparisons are skipped and reported (count and first line
numbers) without stopping the run; a malformed line stops it before training with exit code 2,
naming the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.apps.cli import main
from kitchen.engine.runs.metrics import read_metrics
from tests.preference_workflow.dpo_runs import RunDpo, write_jsonl

GOOD = {"prompt": "What is 2 + 3?", "chosen": "The answer is 5. Thank you!", "rejected": "The answer is 6. Go away."}
NOOP = [
    "backend=noop",
    "data.batch_size=2",
    "data.max_steps=2",
    "data.eval_dataset=null",
    "data.max_length=24",
    "checkpoint.save_every=0",
]


def _with_bad_lines(path: Path) -> Path:
    return write_jsonl(
        path,
        [
            GOOD,  # line 1
            {**GOOD, "chosen": "  "},  # 2: empty completion
            {**GOOD, "rejected": GOOD["chosen"]},  # 3: identical completions
            "",  # 4: blank lines are ignored
            {**GOOD, "prompt": "What is 2 + 3? " * 20},  # 5: prompt longer than max_length
            GOOD,  # 6
            {**GOOD, "rejected": []},  # 7: empty completion
            GOOD,  # 8
        ],
    )


def test_unusable_comparisons_are_skipped_and_reported(
    run_dpo: RunDpo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _with_bad_lines(tmp_path / "bad.jsonl")
    rows = read_metrics(run_dpo(*NOOP, f"data.dataset={data}", "data.num_epochs=3").metrics)
    assert [row["step"] for row in rows] == [0, 1]  # 3 usable pairs: one batch of 2 an epoch, max_steps=2
    first = rows[0]
    assert first["data/train_skipped"] == 4
    assert first["data/train_skipped/empty_completion"] == 2
    assert first["data/train_skipped/identical_completions"] == 1
    assert first["data/train_skipped/prompt_too_long"] == 1
    warning = capsys.readouterr().err
    assert f"skipped 4 of 7 comparisons in {data}" in warning
    assert "empty_completion 2 (lines 2, 7)" in warning and "identical_completions 1 (lines 3)" in warning
    assert "prompt_too_long 1 (lines 5)" in warning


def test_too_few_usable_comparisons_is_a_data_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_jsonl(tmp_path / "few.jsonl", [GOOD, {**GOOD, "chosen": ""}])
    code = main(["run", "dpo", f"data.dataset={data}", f"log_path={tmp_path / 'run'}", *NOOP])
    assert code == 2
    assert f"{data}: 1 usable comparisons are fewer than one batch (data.batch_size=2 pairs)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"prompt": "hi", "chosen": "a", ', "invalid JSON"),
        ('["not", "an", "object"]', "expected one JSON object per line"),
        ('{"prompt": "hi", "chosen": "a"}', "missing key 'rejected'"),
        ('{"prompt": "hi", "chosen": 5, "rejected": "b"}', "'chosen' must be a string or a list of messages"),
    ],
)
def test_malformed_line_exits_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, problem: str
) -> None:
    data = write_jsonl(tmp_path / "broken.jsonl", [GOOD, GOOD, line, GOOD])
    code = main(["run", "dpo", f"data.dataset={data}", f"log_path={tmp_path / 'run'}", *NOOP])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{data} line 3: {problem}" in err
    assert "Traceback" not in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists() or not read_metrics(tmp_path / "run" / "metrics.jsonl")


def test_malformed_held_out_file_is_reported_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", [GOOD, GOOD])
    held_out = write_jsonl(tmp_path / "test.jsonl", [GOOD, "{oops"])
    args = [f"data.dataset={train}", f"log_path={tmp_path / 'run'}", *NOOP, f"data.eval_dataset={held_out}"]
    assert main(["run", "dpo", *args]) == 2
    assert f"{held_out} line 2: invalid JSON" in capsys.readouterr().err
