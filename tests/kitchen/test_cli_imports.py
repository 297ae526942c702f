"""The CLI's cheap commands (`ls`, `show`, `validate`) import no torch: they stay around a second."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import contextlib, io, sys
import kitchen.cli
with contextlib.redirect_stdout(io.StringIO()):
    kitchen.cli.main({argv!r})
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
assert not heavy, f"{argv} imported {{heavy}}"
"""


@pytest.mark.parametrize(
    "argv",
    [["ls"], ["show", "sl_basic"], ["validate", "sl_basic"], ["validate", "dpo"], ["validate", "math_rl"]],
)
def test_cheap_commands_import_no_torch(argv: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(argv=argv)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
