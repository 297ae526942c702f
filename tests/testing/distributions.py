"""Throwaway distributions for extension-point tests: a package and its `.dist-info` (with
`entry_points.txt`) written into a folder that a subprocess puts on `sys.path` — what `pip
install` of a third party's package would leave, with no network and no pip."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.helpers import REPO


def write_distribution(
    root: Path, name: str, modules: Mapping[str, str], entry_points: Mapping[str, Mapping[str, str]]
) -> Path:
    """`modules` (file path -> source) and a `{name}-0.1.dist-info` declaring `entry_points`
    (group -> {entry name: "module:attribute"}) under `root`; returns `root`."""
    for relative, source in modules.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    info = root / f"{name}-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n", encoding="utf-8")
    lines = []
    for group, entries in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{entry} = {target}" for entry, target in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def run_python(args: list[str], path: Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python ARGS` with `path` and the repository on sys.path (as an installed package would be)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(REPO)])}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
