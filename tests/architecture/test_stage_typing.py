"""A stage's types are checked by mypy (with the project's configuration, pydantic plugin on):
returning the wrong type for a key, another output than declared, reading a setting its settings
model does not have, or misusing a read are type errors before anything runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

CASES = Path(__file__).parent / "typing_cases" / "stages.py"


@pytest.mark.slow
def test_mypy_reports_exactly_the_marked_stage_errors() -> None:
    expected = {
        number: re.search(r"# error: (\S+)", line).group(1)  # type: ignore[union-attr]
        for number, line in enumerate(CASES.read_text(encoding="utf-8").splitlines(), start=1)
        if "# error:" in line
    }
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", str(CASES)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    reported = {
        int(match.group(1)): match.group(2)
        for match in re.finditer(r"stages\.py:(\d+): error: .*\[([\w-]+)\]$", result.stdout, re.M)
    }
    assert reported == expected, result.stdout
