"""Module paths of kitchen 0.2 still import for one release (`kitchen.moved`): the old name is an
alias of the moved module, with a DeprecationWarning naming the new path, and docs/how-to/migrate.md
lists every move."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from kitchen import moved

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("old", "new"), sorted(moved.MOVED.items()))
def test_every_move_lands_on_a_module_that_exists(old: str, new: str) -> None:
    assert importlib.util.find_spec(new) is not None, f"{old} -> {new}: no such module"
    assert importlib.util.find_spec(old.replace(".", "/")) is None  # the old file is really gone


def test_an_old_path_is_the_new_module_and_warns() -> None:
    code = (
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "from kitchen.rl.settings import RLSettings\n"
        "import kitchen.config, kitchen.engine.config.loading, kitchen.families.rl.settings as new\n"
        "assert RLSettings is new.RLSettings\n"
        "assert kitchen.config is kitchen.engine.config.loading\n"
        "import kitchen.sandbox, sandbox\n"
        "assert kitchen.sandbox is sandbox\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "kitchen.rl.settings moved to kitchen.families.rl.settings" in done.stderr
    assert "kitchen.config moved to kitchen.engine.config.loading" in done.stderr


def test_a_module_that_did_not_move_is_not_answered() -> None:
    assert moved.new_name("kitchen.engine.stage") is None
    assert moved.new_name("kitchen.stage") == "kitchen.engine.stage"
    assert moved.new_name("kitchen.rl.step") == "kitchen.families.rl.step"
    assert moved.new_name("kitchen.eval.schedule") == "kitchen.engine.config.eval_schedule"


def test_the_migration_page_lists_every_move() -> None:
    page = (ROOT / "docs" / "how-to" / "migrate.md").read_text(encoding="utf-8")
    missing = [f"{old} -> {new}" for old, new in moved.MOVED.items() if f"| `{old}` | `{new}` |" not in page]
    assert missing == []
