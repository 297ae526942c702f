"""The CLI's cheap commands (`ls`, `show`, `validate`) import no torch: they stay around a second."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = [["ls"], ["show", "sl_basic"], ["validate", "sl_basic"], ["validate", "dpo"], ["validate", "math_rl"]]

# One fresh interpreter runs the commands in turn and checks after each, so the first command that
# pulls in a heavy module is the one named (a later command cannot hide or cause it).
SCRIPT = """
import contextlib, io, sys
import kitchen.apps.cli
for argv in {commands!r}:
    with contextlib.redirect_stdout(io.StringIO()):
        kitchen.apps.cli.main(argv)
    heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
    assert not heavy, f"{{argv}} imported {{heavy}}"
"""


def test_cheap_commands_import_no_torch() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(commands=COMMANDS)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
