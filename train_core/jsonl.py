"""The one JSON-lines reader: every data file kitchen reads line by line goes through it, so every
malformed record is reported the same way, as a DataFormatError naming the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from train_core.errors import DataFormatError

JsonRecord = dict[str, Any]


def _text(path: Path) -> str:
    if not path.exists():
        raise DataFormatError(path, None, "no such file")
    if not path.is_file():
        raise DataFormatError(path, None, "is not a file")
    raw = path.read_bytes()
    try:
        # utf-8-sig: a byte-order mark (as some Windows editors write) is accepted and dropped.
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DataFormatError(path, line, f"not UTF-8 text (byte offset {exc.start})") from None


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's keys, each at most once: with duplicates, `json` would silently keep the last."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKeyError(key)
        obj[key] = value
    return obj


def parse_jsonl_line(path: Path, number: int, line: str) -> JsonRecord:
    """Line `number` of `path` as one JSON object (no key twice in one object), or a
    DataFormatError naming the file and line."""
    try:
        value = json.loads(line, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise DataFormatError(path, number, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except _DuplicateKeyError as exc:
        raise DataFormatError(path, number, f"duplicate key {exc.key!r} in a JSON object") from None
    except RecursionError:
        # json recurses once per level of nesting: a record nested ~1000 deep overflows it.
        raise DataFormatError(path, number, "JSON nested too deeply (refused)") from None
    if not isinstance(value, dict):
        raise DataFormatError(path, number, f"expected one JSON object per line, got {type(value).__name__}")
    return value


def read_jsonl(path: str | Path) -> list[tuple[int, JsonRecord]]:
    """Every record of a JSONL file with its 1-based line number; blank lines are skipped.

    Each line must hold one JSON object (no key twice in one object); a file with none is an
    error too."""
    path = Path(path)
    records = []
    for number, line in enumerate(_text(path).splitlines(), start=1):
        if line.strip():
            records.append((number, parse_jsonl_line(path, number, line)))
    if not records:
        raise DataFormatError(path, None, "holds no records")
    return records
