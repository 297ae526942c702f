"""JSON nested ~1000 deep overflows `json`'s recursion: every reader says so instead of raising
RecursionError (a data file names its line; the server answers 4xx)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.apps.report.rundata import read_jsonl as read_run_jsonl
from train_core.errors import DataFormatError
from train_core.jsonl import read_jsonl

DEEP = "[" * 1000 + "]" * 1000


def test_a_data_file_names_the_deep_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n{"x": ' + DEEP + "}\n")
    with pytest.raises(DataFormatError, match=r"d\.jsonl line 2: JSON nested too deeply"):
        read_jsonl(path)


def test_a_run_record_line_nested_too_deeply_counts_as_bad(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n{"x": ' + DEEP + "}\n")
    read = read_run_jsonl(path)
    assert read.records == [{"step": 0}] and read.bad_lines == 1


def test_a_request_body_nested_too_deeply_is_a_wire_error() -> None:
    from kitchen.apps.serve.app import WireError, _json_object

    with pytest.raises(WireError, match="nested too deeply"):
        _json_object(('{"x": ' + DEEP + "}").encode())
