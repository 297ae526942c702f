"""Code blocks of Markdown pages, and a scratch workspace to run them in as a reader would."""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import REPO

MARKER = re.compile(r"^<!-- runnable(?::(?P<args>[^>]*))? -->$")
KITCHEN_CONFIG_COMMAND = re.compile(r"^(?:\.venv/bin/)?kitchen (?:run|validate) ")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    language: str
    text: str
    runnable: bool = False
    args: str = ""
    """`<!-- runnable: ARGS -->`: appended to each `kitchen run` / `kitchen validate` line."""

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    def commands(self) -> list[str]:
        """The shell lines, each with the marker's arguments added where it configures a run."""
        lines = [line.strip() for line in self.text.splitlines()]
        commands = []
        for line in lines:
            if not line or line.startswith("#"):
                continue
            command = re.sub(r"\s+#\s.*$", "", line)
            if self.args and KITCHEN_CONFIG_COMMAND.match(command):
                command = f"{command} {self.args}"
            commands.append(command)
        return commands


def code_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with whether a runnable marker precedes it."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    marker: re.Match[str] | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("```"):
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            text = "\n".join(lines[index + 1 : end])
            args = (marker.group("args") or "").strip() if marker else ""
            blocks.append(Block(path, index + 1, line[3:].strip(), text, marker is not None, args))
            marker, index = None, end + 1
            continue
        found = MARKER.match(line.strip())
        if found:
            marker = found
        elif line.strip():
            marker = None
        index += 1
    return blocks


def workspace(tmp_path: Path) -> Path:
    """A scratch directory that looks like a checkout to the commands (recipes/, examples/ and
    .venv/ link to this one's), so their runs/ and outputs land in it."""
    for name in ("recipes", "examples", "scripts"):
        (tmp_path / name).symlink_to(REPO / name)
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    return tmp_path


def run_command(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run one shell line from `cwd`. `kitchen ...` goes through the CLI's `main` and
    `python script.py ...` through runpy, in this process (the entry points the commands call,
    without paying the interpreter's start-up and imports again for every line); anything else
    runs in bash."""
    argv = shlex.split(command)
    if argv[0] in ("kitchen", ".venv/bin/kitchen"):
        from kitchen.apps.cli import main

        def call() -> int:
            return main(argv[1:])
    elif argv[0] in ("python", ".venv/bin/python") and len(argv) > 1 and argv[1].endswith(".py"):

        def call() -> int:
            with _argv(argv[1:]):
                runpy.run_path(argv[1], run_name="__main__")
            return 0
    else:
        return run_shell(command, cwd)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = call()
        except SystemExit as exc:  # argparse errors, sys.exit in a script
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _argv(args: list[str]) -> Iterator[None]:
    saved = sys.argv
    sys.argv = args
    try:
        yield
    finally:
        sys.argv = saved


def run_python(text: str, cwd: Path) -> str:
    """Run a Python block as a script in `cwd`, in this process; return what it printed."""
    script = cwd / "block.py"
    script.write_text(text)
    out = io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out):
        runpy.run_path(str(script), run_name="__main__")
    return out.getvalue()


def run_shell(command: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
