"""Shared helpers for the run-safety tests: run the CLI in-process, snapshot a run dir."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import pytest

from kitchen.apps.cli import main

FAST = ("backend=noop", "data.max_steps=5", "checkpoint.save_every=2", "eval.every=0")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file's bytes under `directory` (events.jsonl and the lock file excluded: the event log
    is append-only and checked separately)."""
    if not directory.exists():
        return {}
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name not in {"events.jsonl", ".lock"}
    }


def assert_one_error_line(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("kitchen: error:")]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"


_FINISHED: dict[tuple[str, ...], Path] = {}
"""Finished runs already made in this process, by their extra arguments (see `finished_run`)."""


def finished_run(capsys: pytest.CaptureFixture[str], log: Path, *extra: str) -> dict[str, bytes]:
    """A finished noop `sl_basic` run with `extra` arguments at `log`, and its snapshot.

    The first such run of a process is trained; later ones are copies of it with the run
    directory's own path rewritten in its files (the saved config names its log_path), so that
    each is exactly what training at `log` would have left."""
    source = _FINISHED.get(extra)
    if source is None:
        source = Path(tempfile.mkdtemp(prefix="kitchen-finished-")) / "run"
        atexit.register(shutil.rmtree, source.parent, True)
        code, _, err = cli(capsys, "run", "sl_basic", *FAST, f"log_path={source}", *extra)
        assert code == 0, err
        _FINISHED[extra] = source
    shutil.copytree(source, log)
    for path in log.rglob("*"):
        if path.is_file() and path.suffix in {".yaml", ".jsonl", ".json"}:
            text = path.read_text()
            if str(source) in text:
                path.write_text(text.replace(str(source), str(log)))
    return snapshot(log)
