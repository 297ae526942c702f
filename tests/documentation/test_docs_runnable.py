"""Code blocks the docs mark `<!-- runnable -->` run as written, from a scratch checkout-like
directory (`<!-- runnable: ARGS -->` adds ARGS, e.g. `backend=noop max_steps=3`, to each
`kitchen run` / `kitchen validate` line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.documentation.code_blocks import Block, code_blocks, run_command, run_python, workspace
from tests.helpers import REPO

RUNNABLE = [block for page in sorted((REPO / "docs").rglob("*.md")) for block in code_blocks(page) if block.runnable]


def test_the_docs_have_runnable_blocks_in_known_languages() -> None:
    assert len(RUNNABLE) >= 3
    assert {block.language for block in RUNNABLE} <= {"bash", "python"}


@pytest.mark.slow
@pytest.mark.parametrize("block", RUNNABLE, ids=[block.id for block in RUNNABLE])
def test_runnable_block_runs(block: Block, tmp_path: Path) -> None:
    cwd = workspace(tmp_path)
    if block.language == "python":
        run_python(block.text, cwd)
        return
    for command in block.commands():
        result = run_command(command, cwd)
        assert result.returncode == 0, f"{block.id}: {command}\n{result.stderr[-2000:]}"
