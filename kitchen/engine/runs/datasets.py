"""Load records from local JSONL / JSON / parquet files, `datasets.save_to_disk` folders or hub
dataset names (through HF `datasets`).

Local JSONL goes through train_core's one JSON-lines reader, so a malformed line is reported with
its file and line number instead of an opaque parser error deep inside `datasets`. Records with
their locations (`load_located_records`) come from every source through the Arrow cache of
kitchen.engine.runs.record_cache, a batch at a time, so memory does not grow with the data set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, overload

from kitchen.engine.errors import DataError
from kitchen.engine.runs.record_cache import cached_dataset, cached_jsonl, cached_parquet
from train_core.errors import DataFormatError
from train_core.jsonl import read_jsonl
from train_core.renderers.messages import STANDARD_ROLES, Message, MessageFormatError, check_messages

T = TypeVar("T")
LOCAL_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def is_saved_dataset(path: Path) -> bool:
    """A folder written by `datasets.save_to_disk`: a Dataset (`state.json`) or a DatasetDict
    (`dataset_dict.json`, one subfolder per split)."""
    return path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file())


def _load_saved_dataset(path: Path, split: str) -> Any:
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:  # datasets raises many types for a damaged folder
        raise DataError(f"{path}: could not be read as a saved dataset (datasets.save_to_disk): {exc}") from None
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise DataError(f"{path}: the saved dataset has no split {split!r} (splits: {', '.join(sorted(loaded))})")
        return loaded[split]
    return loaded


def is_hub_name(source: str) -> bool:
    """Whether `source` names a hub dataset rather than a local file (no data-file suffix, and no
    such path)."""
    path = Path(source)
    return path.suffix not in LOCAL_SUFFIXES and not path.exists()


def _require_keys(path: Path, records: list[tuple[int, dict[str, Any]]], required_any: Sequence[Sequence[str]]) -> None:
    for line, record in records:
        for keys in required_any:
            if not any(key in record for key in keys):
                raise DataFormatError(path, line, f"missing key {' or '.join(repr(k) for k in keys)}")


def load_located_records(
    source: str, split: str = "train", required_any: Sequence[Sequence[str]] = ()
) -> Sequence[tuple[str, Any]]:
    """`load_records`, each record with where it came from, for error messages: `PATH line N` for
    JSONL (its line in the file), `SOURCE record N` otherwise (1-based). Every source is read
    through its Arrow cache a batch at a time (kitchen.engine.runs.record_cache), so memory does not grow with
    the data set."""
    path = Path(source)
    if path.suffix == ".jsonl":
        located = cached_jsonl(path)
        for where, record in located:
            for keys in required_any:
                if not any(key in record for key in keys):
                    raise DataError(f"{where}: missing key {' or '.join(repr(k) for k in keys)}")
        return located
    if path.suffix != ".parquet":
        return cached_dataset(source, load_records(source, split, required_any))
    table = cached_parquet(path)
    columns = table[0][1].keys()  # every row has the file's columns
    for keys in required_any:
        if not any(key in columns for key in keys):
            raise DataError(f"dataset {source!r} has no column {' or '.join(repr(k) for k in keys)}")
    return table


class BuiltRecords(Sequence[T]):
    """What `build(where, record)` makes of each located record at `kept` (all by default), made
    each time it is asked for: memory holds the records' positions, not what they become, so it
    does not grow with the data set (records are read back from their cache a batch at a time).
    The price is building a record again each time it is used."""

    def __init__(
        self, located: Sequence[tuple[str, Any]], build: Callable[[str, Any], T], kept: Sequence[int] | None = None
    ) -> None:
        self.located, self.build = located, build
        self.kept = range(len(located)) if kept is None else kept

    def __len__(self) -> int:
        return len(self.kept)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self.build(*self.located[self.kept[index]])


def build_all(
    source: str, build: Callable[[str, Any], T], split: str = "train", required_any: Sequence[Sequence[str]] = ()
) -> BuiltRecords[T]:
    """Every record of `source` built once (so a bad one is an error naming it, before any work),
    then kept as a `BuiltRecords` that builds them again when asked for."""
    located = load_located_records(source, split, required_any)
    for where, record in located:
        build(where, record)
    return BuiltRecords(located, build)


def prompt_key(record: Mapping[str, Any]) -> str:
    """Where a prompt record keeps its prompt: `prompt` when set, else `messages`."""
    return "prompt" if record.get("prompt") is not None else "messages"


def prompt_messages(
    record: Mapping[str, Any], where: str, roles: frozenset[str] = STANDARD_ROLES, images: bool = False
) -> list[Message]:
    """A prompt record's conversation: a string `prompt` (one user message), or a non-empty list of
    {role, content} messages (roles among `roles`; content with image parts when `images`) under
    `prompt` or `messages`; anything else is a DataError naming `where`."""
    key = prompt_key(record)
    value = record.get(key)
    if isinstance(value, str):
        return [Message(role="user", content=value)]
    if not isinstance(value, list) or not value:
        raise DataError(
            f"{where}: a prompt record needs a string 'prompt', or a non-empty list of {{role, content}} "
            "messages under 'prompt' or 'messages'"
        )
    try:
        check_messages(value, roles, key, images)
    except MessageFormatError as exc:
        raise DataError(f"{where}: {exc}") from None
    return [Message(role=m["role"], content=m["content"]) for m in value]


def load_records(source: str, split: str = "train", required_any: Sequence[Sequence[str]] = ()) -> Any:
    """The records of a local file (by suffix) or a hub dataset, each holding, for each group in
    `required_any`, at least one of its keys. JSONL gives a list of dicts (each value exactly as
    written); other sources a `datasets.Dataset`."""
    path = Path(source)
    if path.suffix == ".jsonl":
        records = read_jsonl(path)
        _require_keys(path, records, required_any)
        return [record for _, record in records]
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its errors reach the user in our error line
    if is_saved_dataset(path):
        dataset = _load_saved_dataset(path, split)
    elif path.suffix in LOCAL_SUFFIXES:
        if not path.is_file():
            raise DataError(f"dataset file not found: {path}")
        try:
            dataset = datasets.load_dataset(LOCAL_SUFFIXES[path.suffix], data_files=str(path), split="train")
        except Exception as exc:  # datasets raises many types for unreadable files
            raise DataError(f"{path}: could not be read as {path.suffix[1:]}: {exc}") from None
    elif path.exists():
        raise DataError(
            f"{path}: unsupported dataset file type (use .jsonl, .json, .parquet or a datasets.save_to_disk folder)"
        )
    else:
        try:
            dataset = datasets.load_dataset(source, split=split)
        except Exception as exc:
            raise DataError(f"dataset {source!r} (split {split!r}) could not be loaded: {exc}") from None
    for keys in required_any:
        if not any(key in dataset.column_names for key in keys):
            raise DataError(f"dataset {source!r} has no column {' or '.join(repr(k) for k in keys)}")
    return dataset
