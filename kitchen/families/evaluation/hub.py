"""Benchmark data by name from the Hugging Face hub, or from a local copy of it.

A benchmark names where its data lives on the hub: a dataset (`HubDataset`: repo, config, split,
read by `datasets.load_dataset`) or files in a dataset repo (`hub_file`, fetched by
`huggingface_hub.hf_hub_download`). `TASK:PATH` on the command line (the task's `dataset`
setting) points it at a local copy instead: a data file, a `datasets.save_to_disk` folder, or a
folder laid out like the hub repo. Hub data always goes through those real loaders, so a filled
Hugging Face cache serves it with `HF_HUB_OFFLINE=1` and no network; a failure is a DataError
naming the dataset and the two ways to get it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kitchen.engine.errors import DataError
from kitchen.engine.runs.datasets import is_saved_dataset, load_records

TABULAR_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


@dataclass(frozen=True)
class HubDataset:
    """A dataset on the hub as `datasets.load_dataset(repo, config, split=split)` reads it."""

    repo: str
    config: str | None = None
    split: str = "test"

    def describe(self) -> str:
        return self.repo + (f" ({self.config})" if self.config else "") + f" split {self.split}"


def _unreachable(what: str, exc: BaseException) -> DataError:
    return DataError(
        f"{what} could not be loaded ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
        "it is read from the Hugging Face hub (log in with `hf auth login` for a gated one), or give a local "
        "copy as TASK:PATH"
    )


def load_rows(source: HubDataset, local: str | None = None) -> list[dict[str, Any]]:
    """Every row of `source`, or of the local copy `local` (a data file, a saved dataset, or a
    folder laid out like the hub repo), as plain dicts."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    if local is None:
        try:
            loaded = datasets.load_dataset(source.repo, source.config, split=source.split)
        except Exception as exc:  # datasets raises many types (offline, gated, missing split)
            raise _unreachable(f"dataset {source.describe()}", exc) from None
        return [dict(row) for row in loaded]
    path = Path(local)
    if not path.exists():
        raise DataError(f"{local}: no such file or folder (a local copy of {source.repo})")
    if path.is_file() and path.suffix in (".jsonl", ".parquet"):
        return [dict(row) for row in load_records(local, source.split)]
    if path.is_file() and path.suffix in TABULAR_SUFFIXES:
        try:
            loaded = datasets.load_dataset(TABULAR_SUFFIXES[path.suffix], data_files=str(path), split="train")
        except Exception as exc:
            raise DataError(f"{local}: could not be read as {path.suffix[1:]}: {exc}") from None
        return [dict(row) for row in loaded]
    if is_saved_dataset(path):
        return [dict(row) for row in load_records(local, source.split)]
    if path.is_dir():
        try:
            loaded = datasets.load_dataset(str(path), source.config, split=source.split)
        except Exception as exc:
            raise DataError(f"{local}: not a copy of {source.describe()}: {exc}") from None
        return [dict(row) for row in loaded]
    raise DataError(f"{local}: use a .jsonl, .json, .parquet or .csv file, or a folder (a copy of {source.repo})")


def hub_file(repo: str, filename: str, local: str | None = None) -> Path:
    """The file `filename` of the hub dataset repo `repo` (downloaded into, or found in, the
    Hugging Face cache), or `local/filename` when a local copy of the repo is given."""
    if local is not None:
        path = Path(local) / filename
        if not path.is_file():
            raise DataError(f"{local}: no {filename} (a local copy of the hub dataset {repo} has it)")
        return path
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo, filename, repo_type="dataset"))
    except Exception as exc:  # offline without the file in the cache, gated, missing
        raise _unreachable(f"{repo}/{filename}", exc) from None


def require(row: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    """A DataError naming `where` and the first of `keys` the row lacks."""
    missing = [key for key in keys if key not in row]
    if missing:
        raise DataError(f"{where}: missing field {missing[0]!r} (has: {', '.join(sorted(map(str, row)))})")
