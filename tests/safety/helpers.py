"""Shared helpers for the run-safety tests: run the CLI in-process, snapshot a run dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.cli import main

FAST = ("backend=noop", "max_steps=5", "save_every=2", "eval_every=0")


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


def finished_run(capsys: pytest.CaptureFixture[str], log: Path, *extra: str) -> dict[str, bytes]:
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, f"log_path={log}", *extra)
    assert code == 0, err
    return snapshot(log)
