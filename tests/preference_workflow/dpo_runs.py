"""Helpers for the preference workflow tests: running the `dpo` recipe in-process, writing data."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import RunDir, run_recipe
from kitchen.engine.recipe import get_recipe


class RunDpo(Protocol):
    def __call__(self, *overrides: str, log_path: Path | None = None) -> RunDir: ...


def run_dpo_recipe(log_path: Path, overrides: Sequence[str]) -> RunDir:
    """Run the dpo recipe with key=value `overrides`, as `kitchen run dpo` would (no progress bar)."""
    recipe = get_recipe("dpo")
    config = load_config(recipe.config_cls, None, [f"log_path={log_path}", *overrides])
    return run_recipe(recipe, config, progress=False)


def write_jsonl(path: Path, records: Sequence[dict[str, Any] | str]) -> Path:
    """One line per record: dicts as JSON, strings verbatim (for malformed lines)."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path
