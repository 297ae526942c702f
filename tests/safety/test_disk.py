"""A full disk and a read-only run dir (a small tmpfs; skipped where mounting is not permitted):
one error line naming the path, exit 2, no traceback, no `.partial` left behind."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.safety.helpers import FAST, assert_one_error_line, cli


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "mnt"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_full_disk(tmpfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    filler = tmpfs / "filler"
    with filler.open("wb") as handle:
        handle.write(b"\0" * (2 * 1024 * 1024 - 24 * 1024))
    log = tmpfs / "run"
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=30", f"log_path={log}")
    assert_one_error_line(code, err)
    assert "space" in err.lower() and str(tmpfs) in err
    assert not list(tmpfs.rglob("*.partial")) and not list(tmpfs.rglob("*.tmp"))


def test_read_only_run_dir(tmpfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmpfs / "run"
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=3", f"log_path={log}")
    assert code == 0, err
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "data.max_steps=6", f"log_path={log}")
    assert_one_error_line(code, err, str(log), "read-only")


def _assert_previous_checkpoint_kept(log: Path) -> None:
    from kitchen.engine.runs.checkpoints import read_records
    from kitchen.engine.runs.rundir import verify_record

    records = read_records(log / "checkpoints.jsonl")
    assert [r.name for r in records] == ["000002"]
    assert verify_record(records[0], log) is None  # intact: the rerun resumes from it
    assert not list(log.rglob("*.partial"))


@pytest.mark.slow
def test_full_disk_during_a_local_checkpoint(tmpfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real full disk (8 MB tmpfs: one tiny-model checkpoint fits, the second does not). It used
    to end in torch's `RuntimeError: [enforce fail at inline_container.cc]`, exit 1."""
    subprocess.run(["mount", "-o", "remount,size=8m", str(tmpfs)], check=True)
    log = tmpfs / "run"
    code, _, err = cli(
        capsys,
        "run",
        "sl_basic",
        "data.max_steps=6",
        "checkpoint.save_every=2",
        "eval.every=0",
        "data.batch_size=4",
        f"log_path={log}",
    )
    assert_one_error_line(code, err, "no space left on device", "weights/000004", "previous checkpoint is kept")
    _assert_previous_checkpoint_kept(log)


def test_disk_full_while_writing_the_optimizer_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on any machine: the full disk is simulated (a fake file system error, as torch's zip
    writer raises it, and a file system that reports 1 KB free), since a real one needs a mount."""
    import shutil

    import torch

    real_save, saves = torch.save, []

    def save(obj: object, path: Path) -> None:
        saves.append(path)
        if len(saves) == 2:
            Path(path).write_bytes(b"PK\x03\x04 half a file")
            full = shutil._ntuple_diskusage(10**9, 10**9 - 1024, 1024)
            monkeypatch.setattr(shutil, "disk_usage", lambda _: full)
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 2299840 vs 2299728")
        real_save(obj, path)

    monkeypatch.setattr(torch, "save", save)
    log = tmp_path / "run"
    code, _, err = cli(
        capsys,
        "run",
        "sl_basic",
        "data.max_steps=4",
        "checkpoint.save_every=2",
        "eval.every=0",
        "data.batch_size=2",
        f"log_path={log}",
    )
    assert_one_error_line(code, err, "no space left on device", "weights/000004", "and 1,024 are free")
    _assert_previous_checkpoint_kept(log)
