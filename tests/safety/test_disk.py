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
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "max_steps=30", f"log_path={log}")
    assert_one_error_line(code, err)
    assert "space" in err.lower() and str(tmpfs) in err
    assert not list(tmpfs.rglob("*.partial")) and not list(tmpfs.rglob("*.tmp"))


def test_read_only_run_dir(tmpfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmpfs / "run"
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "max_steps=3", f"log_path={log}")
    assert code == 0, err
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    code, _, err = cli(capsys, "run", "sl_basic", *FAST, "max_steps=6", f"log_path={log}")
    assert_one_error_line(code, err, str(log), "read-only")
