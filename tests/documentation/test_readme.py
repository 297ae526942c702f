"""The README stays short, and every command in it is executed: here (on the noop backend) or, for
set-up and the whole test suite, by CI's `.ci/run`, which must run them exactly as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.documentation.code_blocks import code_blocks, run_command, run_python, workspace
from tests.helpers import REPO

README = REPO / "README.md"
CI_LINES = {line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()}


def readme_commands() -> list[str]:
    """Each shell command of the README's bash blocks, `a && b` split into its parts."""
    return [
        part.strip()
        for block in code_blocks(README)
        if block.language == "bash"
        for command in block.commands()
        for part in command.split("&&")
    ]


def test_readme_is_at_most_10_kb() -> None:
    assert len(README.read_bytes()) <= 10 * 1024


def test_readme_has_the_two_setup_commands() -> None:
    commands = [command for block in code_blocks(README) for command in block.commands()]
    assert "bash scripts/setup.sh && .venv/bin/kitchen run sl_basic" in commands
    assert 'bash scripts/setup.sh && .venv/bin/python -m pytest -q -n 2 -m "not acceptance"' in commands


def test_every_readme_command_is_run_by_ci_or_by_a_test_here() -> None:
    unexecuted = [
        command
        for command in readme_commands()
        if command not in CI_LINES and not command.startswith(".venv/bin/kitchen ")
    ]
    assert unexecuted == [], "add a test that runs these README commands, or run them in .ci/run"


def test_readme_links_point_at_files() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if not link.startswith("http")]
    assert local and [link for link in local if not (REPO / link).exists()] == []


@pytest.mark.slow
def test_readme_kitchen_commands_run_on_the_noop_backend(tmp_path: Path) -> None:
    """`.venv/bin/kitchen run sl_basic` as written, on noop (the local run is tests/e2e/test_sl_basic_cli.py)."""
    cwd = workspace(tmp_path)
    for command in [c for c in readme_commands() if c.startswith(".venv/bin/kitchen ")]:
        extra = " backend=noop" if command.startswith(".venv/bin/kitchen run ") else ""
        result = run_command(command + extra, cwd)
        assert result.returncode == 0, f"{command}: {result.stderr[-2000:]}"
    assert list((cwd / "runs").glob("sl_basic-*/checkpoints.jsonl"))


@pytest.mark.slow
def test_readme_python_example_runs_as_shown(tmp_path: Path) -> None:
    (python,) = [block for block in code_blocks(README) if block.language == "python"]
    cwd = workspace(tmp_path)
    printed = run_python(python.text, cwd)
    assert int(float(printed.strip().splitlines()[-1])) > 0  # the longest sequence of the last batch
    assert list(cwd.glob("runs/sft_plus-*/metrics.jsonl"))
