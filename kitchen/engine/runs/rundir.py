"""Safety of a run directory: one process per run (a lock), refusing paths that are not run
directories, the config fingerprint a checkpoint was trained with, checkpoint file integrity,
and config history.

See docs/reference/run-directory.md and docs/explanation/run-safety.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from kitchen.engine.config.renames import translate_fingerprint
from kitchen.engine.config.run import RunConfig
from kitchen.engine.config.sections import choices_of, fields_at, model_of, resume_role
from kitchen.engine.errors import ConfigError, RunDirError, run_dir_gone
from kitchen.engine.hooks import Hooks
from kitchen.engine.runs.checkpoints import CheckpointRecord, read_records
from kitchen.engine.secrets import redact_value

RUN_FILES = ("config.yaml", "metrics.jsonl", "checkpoints.jsonl", "events.jsonl")
LOCK_FILE = ".lock"
HISTORY_FILE = "config_history.yaml"

DATA_FILE_KEYS = ("dataset",)
"""Keys naming a local data file whose size and sha256 join the fingerprint (`<key>#file`)."""

_HASH_LIMIT = 256 * 1024 * 1024


# -- log_path checks ---------------------------------------------------------------------------


def is_run_dir(path: Path) -> bool:
    return any((path / name).exists() for name in ("config.yaml", "metrics.jsonl", "checkpoints.jsonl"))


def check_log_path(path: Path, overwrite: bool, resume: str) -> None:
    """Refuse a log_path that is a file, lies under a file, is not a run directory, or cannot be
    written; `resume=never` on an existing run needs `overwrite=true`. Touches nothing."""
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            what = "is a file" if parent == path else f"lies under {parent}, which is a file"
            raise RunDirError(f"log_path {path}: {what}, not a directory")
        if parent.exists():
            break
    if path.is_dir():
        if not is_run_dir(path) and any(path.iterdir()):
            raise RunDirError(
                f"log_path {path}: exists, is not empty and is not a kitchen run directory (no config.yaml, "
                "metrics.jsonl or checkpoints.jsonl); choose another log_path"
            )
        if is_run_dir(path) and resume == "never" and not overwrite:
            raise RunDirError(
                f"log_path {path}: holds a run and resume=never would discard it; pass overwrite=true to "
                "start it over, or choose another log_path"
            )
    existing = next((p for p in [path, *path.parents] if p.exists()), None)
    if existing is not None:
        probe_writable(path, existing)


def probe_writable(path: Path, directory: Path) -> None:
    """Create and remove an empty file in `directory` (access() says yes to root everywhere)."""
    try:
        with tempfile.TemporaryFile(dir=directory, prefix=".kitchen-probe-"):
            pass
    except OSError as exc:
        raise RunDirError(describe_os_error(exc, f"log_path {path}: {directory} is not writable")) from None


def _dir_identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


class RunDirWatch(Hooks):
    """Fails the run (`run_dir_gone`) when its directory disappears or is replaced by another while
    it runs (an `rm -rf` from another shell, a cleanup job): checked at every step end and after
    each stage outside the step loops (setup, the final save), one `stat` each. Without it the run
    would go on writing into deleted files, or recreate an empty directory on its next save, and
    report success."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._identity = _dir_identity(path)

    def check(self) -> None:
        if _dir_identity(self.path) != self._identity:
            raise run_dir_gone(self.path)

    def on_step_end(self, ctx: Any, step: int) -> None:
        self.check()

    def after_stage(self, ctx: Any, stage: Any, seconds: float) -> None:
        if ctx.total_steps is None or ctx.step >= ctx.total_steps:
            self.check()


def describe_os_error(exc: OSError, what: str) -> str:
    reason = {errno.ENOSPC: "no space left on device", errno.EROFS: "read-only file system"}.get(
        exc.errno or 0, exc.strerror or str(exc)
    )
    return f"{what}: {exc.filename or ''}: {reason}".replace(": : ", ": ")


# -- the lock ----------------------------------------------------------------------------------


class RunLock:
    """An exclusive `flock` on RUN_DIR/.lock for the life of a run: released on any exit, and
    by the kernel when the process dies (no stale locks). The file holds the holder's PID."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunDirError(describe_os_error(exc, "cannot create the run lock")) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise RunDirError(
                f"log_path {self.path.parent}: another kitchen process (pid {holder}) is running this run; "
                "wait for it to finish or choose another log_path"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass  # the lock holds even if the PID cannot be written (full disk)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# -- fingerprint -------------------------------------------------------------------------------


def file_signature(path: Path) -> dict[str, Any]:
    """Size and sha256 of a file (size and mtime only for files over 256 MB)."""
    stat = path.stat()
    if stat.st_size > _HASH_LIMIT:
        return {"size": stat.st_size, "mtime": int(stat.st_mtime)}
    return {"size": stat.st_size, "sha256": sha256_file(path)}


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def key_role(model: type[BaseModel], path: tuple[str, ...]) -> str | None:
    """The resume role (`kitchen.engine.config.sections.resume_role`) of the key at `path`: that
    of the first field on the way that has one (a safe section is safe throughout)."""
    models: list[type[BaseModel]] = [model]
    for part in path:
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if not fields:
            return None
        for field in fields:
            role = resume_role(field)
            if role is not None:
                return role
        models = []
        for field in fields:
            choices = choices_of(field)
            members = list(choices[1].values()) if choices is not None else [model_of(field.annotation)]
            models += [member for member in members if member is not None]
    return None


def _flat(config: BaseModel) -> dict[str, Any]:
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, child in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), child)
        else:
            flat[prefix] = value

    walk("", config.model_dump(mode="json"))
    return flat


RECIPE_KEY = "recipe"
"""The fingerprint's entry for the recipe that trained (compared only when the record has it)."""


def run_lengths(config: BaseModel) -> dict[str, Any]:
    """`@key` -> value of every key that says how long the run trains (`RUN_LENGTH`)."""
    return {
        f"@{key}": value
        for key, value in _flat(config).items()
        if key_role(type(config), tuple(key.split("."))) == "length"
    }


def fingerprint(config: BaseModel, recipe: str | None = None) -> dict[str, Any]:
    """The settings that define what a run trains: every config key but those a resume may change
    (`RESUME_SAFE`, `RUN_LENGTH`), flattened to dotted keys, and each local data file's size +
    sha256 (`data.dataset#file`); plus the run-length keys as `@key` (not compared: they tell
    whether a finished run is complete); plus the `recipe` when given."""
    flat = _flat(config)
    print_ = {key: value for key, value in flat.items() if key_role(type(config), tuple(key.split("."))) is None}
    print_.update(run_lengths(config))
    for key, value in flat.items():
        if key.rpartition(".")[2] in DATA_FILE_KEYS and isinstance(value, str) and Path(value).is_file():
            with contextlib.suppress(OSError):
                print_[f"{key}#file"] = file_signature(Path(value))
    if recipe is not None:
        print_[RECIPE_KEY] = recipe
    return dict(redact_value(print_))


def recorded_fingerprint(record: CheckpointRecord, config: BaseModel) -> dict[str, Any]:
    """The fingerprint `record` was saved with, in this config's layout (a 0.2 record's flat keys
    renamed: `kitchen.engine.config.renames`)."""
    return translate_fingerprint(config, record.fingerprint)


def fingerprint_changes(
    recorded: dict[str, Any], current: dict[str, Any], allowed: Iterable[str]
) -> list[tuple[str, Any, Any]]:
    """(key, recorded, current) for every key whose value differs and is not allowed to (`allowed`:
    keys or sections, dotted)."""
    allowed = set(allowed)
    changes = []
    for key in sorted(set(recorded) | set(current)):
        if key.startswith("@"):
            continue
        base = key.split("#")[0]
        parts = base.split(".")
        if any(".".join(parts[:cut]) in allowed for cut in range(1, len(parts) + 1)):
            continue
        old, new = recorded.get(key, "<unset>"), current.get(key, "<unset>")
        if old != new:
            changes.append((key, old, new))
    return changes


def holds_default(config_cls: type[BaseModel], key: str, value: Any) -> bool:
    """Whether the dotted `key` holds its field's default: a key added after a run was recorded
    changes nothing there at its default (a new key's default keeps the old behaviour)."""
    found = fields_at(config_cls, tuple(key.split(".")))
    return bool(found) and all(
        to_jsonable_python(field.get_default(call_default_factory=True)) == value for _, field in found
    )


def check_resume_fingerprint(
    record: CheckpointRecord, config: RunConfig, recipe: str | None = None, complete: bool = False
) -> None:
    """A ConfigError listing each setting (or the recipe) that differs from what `record` was
    trained with. For a `complete` run (nothing more to train) the error says so: reporting it
    "already complete" would claim a result the changed settings never produced."""
    if not record.fingerprint:
        return  # a record from before fingerprints: nothing to compare
    allowed = config.resume_allow_changes  # in the current layout (`RunConfig` renames 0.2 keys)
    recorded = recorded_fingerprint(record, config)
    current = fingerprint(config, recipe if RECIPE_KEY in recorded else None)
    changes = [
        (key, old, new)
        for key, old, new in fingerprint_changes(recorded, current, allowed)
        if not (key not in recorded and holds_default(type(config), key, new))
    ]
    if not changes:
        return
    parts = [f"{key}: {_short(old)} -> {_short(new)}" for key, old, new in changes]
    keys = ",".join(key for key, _, _ in changes)
    if complete:
        raise ConfigError(
            f"this run is already complete ({record.step} steps, checkpoint 'final') and was trained with other "
            f"settings ({'; '.join(parts)}); use a new log_path for the changed run, or pass "
            f"resume_allow_changes=[{keys}] to accept the finished run as it is"
        )
    raise ConfigError(
        f"cannot resume from checkpoint {record.name!r} (step {record.step}): the config changed what is "
        f"trained ({'; '.join(parts)}); pass resume_allow_changes=[{keys}] to accept, or use a new log_path"
    )


def _short(value: Any) -> str:
    if isinstance(value, dict) and "sha256" in value:
        return f"{value['size']} bytes sha256 {str(value['sha256'])[:12]}"
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- checkpoint integrity ----------------------------------------------------------------------


@dataclass(frozen=True)
class Skipped:
    name: str
    reason: str


def record_files(paths: Iterable[Path], run_dir: Path) -> dict[str, dict[str, Any]]:
    """Size + sha256 of each file, keyed by its path relative to the run dir when inside it."""
    files = {}
    for path in paths:
        try:
            key = str(path.resolve().relative_to(run_dir.resolve()))
        except ValueError:
            key = str(path.resolve())
        stat = path.stat()
        files[key] = {"size": stat.st_size, "sha256": sha256_file(path)}
    return files


def verify_record(record: CheckpointRecord, run_dir: Path) -> str | None:
    """None when every file the record lists is there with its size and sha256; else why not."""
    for key, expected in record.files.items():
        path = Path(key) if Path(key).is_absolute() else run_dir / key
        if not path.is_file():
            return f"{key} is missing"
        size = path.stat().st_size
        if size != expected.get("size"):
            return f"{key} has {size} bytes, {expected.get('size')} were saved"
        if expected.get("sha256") and sha256_file(path) != expected["sha256"]:
            return f"{key} does not match its saved sha256"
    return None


def choose_resume_point(run_dir: Path) -> tuple[CheckpointRecord | None, list[Skipped]]:
    """The newest resumable record whose files are intact, and the newer ones skipped (why).
    No intact one when some exist is an error naming each."""
    skipped: list[Skipped] = []
    records = [r for r in read_records(run_dir / "checkpoints.jsonl") if r.state_path]
    for record in reversed(records):
        problem = verify_record(record, run_dir)
        if problem is None:
            return record, skipped
        skipped.append(Skipped(record.name, problem))
    if skipped:
        reasons = "; ".join(f"{s.name}: {s.reason}" for s in skipped)
        raise RunDirError(f"log_path {run_dir}: no intact checkpoint to resume from ({reasons})")
    return None, skipped


# -- config history ----------------------------------------------------------------------------


def dump_config_with_history(config: BaseModel, run_dir: Path) -> None:
    """Write config.yaml (secrets redacted); a previous, different one is appended to
    config_history.yaml first, with the time it was replaced."""
    path = run_dir / "config.yaml"
    text = yaml.safe_dump(redact_value(config.model_dump(mode="json")), sort_keys=False)
    if path.exists():
        old = path.read_text(encoding="utf-8", errors="replace")
        if old == text:
            return
        entry = f"# replaced {time.strftime('%Y-%m-%dT%H:%M:%S')}\n---\n{old}"
        with (run_dir / HISTORY_FILE).open("a", encoding="utf-8") as handle:
            handle.write(entry if old.endswith("\n") else entry + "\n")
    tmp = path.with_name("config.yaml.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
