from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kitchen.engine.runs.checkpoints import CheckpointRecord, append_record, last_resumable, read_records


def test_append_and_last_resumable(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.jsonl"
    assert last_resumable(path) is None
    append_record(path, CheckpointRecord("000010", 10, {"train": 9}, {}, "s10", "p10"))
    append_record(path, CheckpointRecord("000020", 20, {"train": 19}, {"k": [1]}, "s20", "p20"))
    append_record(path, CheckpointRecord("sampler-only", 25, {}, {}, None, "p25"))
    record = last_resumable(path)
    assert record is not None and (record.name, record.step, record.loops, record.state) == (
        "000020",
        20,
        {"train": 19},
        {"k": [1]},
    )


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.jsonl"
    append_record(path, CheckpointRecord("000005", 5, {"train": 4}, {}, "s5", "p5"))
    with path.open("a") as handle:
        handle.write('{"name": "000010", "step": 1')
    assert [r.name for r in read_records(path)] == ["000005"]
    record = last_resumable(path)
    assert record is not None and record.name == "000005"


@given(
    name=st.text(min_size=1, max_size=10),
    step=st.integers(0, 10**6),
    loops=st.dictionaries(st.text(min_size=1, max_size=5), st.integers(0, 1000), max_size=3),
)
def test_record_json_round_trip(name: str, step: int, loops: dict[str, int]) -> None:
    import json

    record = CheckpointRecord(name, step, loops, {"x": 1}, "a", "b")
    assert CheckpointRecord.from_dict(json.loads(record.to_json())) == record
