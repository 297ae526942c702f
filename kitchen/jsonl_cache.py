"""JSONL data files read in bounded memory: each file is checked and converted once, line by line,
into an Arrow file in a cache keyed by the file's content hash, and records are then read back a
batch of lines at a time. Peak memory is a batch of records, whatever the size of the file: a
1 GB SFT file no longer needs its text, its lines and its parsed objects in memory at once.

The cache keeps the raw JSON text of each line (so every value reads back exactly as written) and
its line number (so errors still name `PATH line N`). It lives in `$KITCHEN_CACHE_DIR` (default
`~/.cache/kitchen`)/jsonl; a changed file has another hash and is converted again.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import pyarrow as pa

from train_core.errors import DataFormatError
from train_core.jsonl import parse_jsonl_line

CACHE_ENV = "KITCHEN_CACHE_DIR"
ROWS_PER_BATCH = 1024
SCHEMA = pa.schema([("line", pa.int64()), ("json", pa.large_string())])
FORMAT_VERSION = "1"
"""Part of the cache key: bump it when the cached layout changes."""


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "kitchen") / "jsonl"


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256(FORMAT_VERSION.encode())
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _check_file(path: Path) -> None:
    if not path.exists():
        raise DataFormatError(path, None, "no such file")
    if not path.is_file():
        raise DataFormatError(path, None, "is not a file")


def _convert(path: Path, target: Path) -> None:
    """Check every line of `path` (one JSON object each) and write them to `target`, a batch at a
    time; the file appears under its final name only when complete."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
    os.close(fd)
    lines: list[int] = []
    texts: list[str] = []
    records = 0
    try:
        with path.open("rb") as handle, pa.OSFile(tmp_name, "wb") as sink, pa.ipc.new_file(sink, SCHEMA) as writer:

            def flush() -> None:
                columns = [pa.array(lines, pa.int64()), pa.array(texts, pa.large_string())]
                writer.write_batch(pa.record_batch(columns, schema=SCHEMA))
                lines.clear()
                texts.clear()

            offset = 0
            for number, raw in enumerate(handle, start=1):
                text = _decode(path, raw, number, offset, first=number == 1)
                offset += len(raw)
                if not text.strip():
                    continue
                parse_jsonl_line(path, number, text)  # raises DataFormatError naming the line
                lines.append(number)
                texts.append(text.rstrip("\r\n"))
                records += 1
                if len(lines) == ROWS_PER_BATCH:
                    flush()
            if lines:
                flush()
        if not records:
            raise DataFormatError(path, None, "holds no records")
        os.replace(tmp_name, target)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)


def _decode(path: Path, raw: bytes, number: int, offset: int, first: bool) -> str:
    try:
        # utf-8-sig on the first line: a byte-order mark (as some Windows editors write) is dropped.
        return raw.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(path, number, f"not UTF-8 text (byte offset {offset + exc.start})") from None


class JsonlRecords(Sequence[tuple[str, dict[str, Any]]]):
    """`(where, record)` for each record of a JSONL file, read from its Arrow cache a batch at a
    time (`where` is `PATH line N`). Indexing and iteration both hold one batch in memory."""

    def __init__(self, path: Path, arrow_file: Path) -> None:
        self.path = path
        self._reader = pa.ipc.open_file(pa.OSFile(str(arrow_file), "rb"))
        self._starts = [0]
        for index in range(self._reader.num_record_batches):
            self._starts.append(self._starts[-1] + self._reader.get_batch(index).num_rows)
        self._cached: tuple[int, list[int], list[str]] | None = None

    def __len__(self) -> int:
        return self._starts[-1]

    def _batch(self, index: int) -> tuple[list[int], list[str]]:
        if self._cached is None or self._cached[0] != index:
            batch = self._reader.get_batch(index)
            self._cached = (index, batch.column(0).to_pylist(), batch.column(1).to_pylist())
        return self._cached[1], self._cached[2]

    def _record(self, lines: list[int], texts: list[str], row: int) -> tuple[str, dict[str, Any]]:
        return f"{self.path} line {lines[row]}", json.loads(texts[row])

    @overload
    def __getitem__(self, index: int) -> tuple[str, dict[str, Any]]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[str, dict[str, Any]]]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        batch = bisect.bisect_right(self._starts, index) - 1
        lines, texts = self._batch(batch)
        return self._record(lines, texts, index - self._starts[batch])

    def __iter__(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for batch in range(len(self._starts) - 1):
            lines, texts = self._batch(batch)
            for row in range(len(lines)):
                yield self._record(lines, texts, row)


def cached_jsonl(path: str | Path) -> JsonlRecords:
    """The records of a JSONL file through its Arrow cache, converting (and checking) it first
    when the cache has no copy of this content."""
    path = Path(path)
    _check_file(path)
    target = cache_dir() / f"{_file_hash(path)}.arrow"
    if not target.is_file():
        _convert(path, target)
    return JsonlRecords(path, target)
