"""Module paths of kitchen 0.2 still import for one release (`kitchen.moved`): the old name is an
alias of the moved module, with a DeprecationWarning naming the new path, and docs/how-to/migrate.md
lists every move."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kitchen import moved
from tests.testing.distributions import run_python, write_distribution

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


PLUGIN_02 = textwrap.dedent(
    '''
    """A third party's RL environment written against kitchen 0.2: old module paths, settings
    without a `name`, the run's keys read by their flat names."""
    from pydantic import Field

    from kitchen.rl.envs import EnvSettings, EnvSpec
    from recipes.envs.guess_number import guess_number_task


    class CoinSettings(EnvSettings):
        sides: int = Field(2, ge=2, description="the coin's sides")


    def coin_task(settings, rl, renderer):
        return guess_number_task(
            renderer, num_batches=rl.num_batches, groups_per_batch=rl.groups_per_batch,
            group_size=rl.group_size, max_number=settings.sides, max_turns=1, seed=rl.seed,
        )


    COIN = EnvSpec("guess a coin's side in one try", CoinSettings, coin_task)
    '''
)


@pytest.mark.slow
def test_a_plugin_written_for_0_2_still_trains_with_warnings(tmp_path: Path) -> None:
    """Its old import paths, its unnamed settings and its flat reads of the config, and a command
    line of 0.2's flat keys: the run trains, and each old name is named with its new one."""
    site = write_distribution(
        tmp_path / "site", "kitchen-coin-02", {"coin_02.py": PLUGIN_02}, {"kitchen.envs": {"coin": "coin_02:COIN"}}
    )
    args = ["env=coin", "env_args.sides=3", "backend=noop", "num_batches=1", "warm_start_steps=1"]
    args += ["groups_per_batch=2", "group_size=2", "log_path=env_run"]
    result = run_python(["-W", "default", "-m", "kitchen", "run", "env_rl", *args], site, tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "env_run" / "checkpoints.jsonl").exists()
    err = result.stderr
    assert "kitchen.rl moved to kitchen.families.rl" in err
    assert "declares no `name: Literal['coin']`" in err
    assert "config key 'env_args.sides' is 'env.sides'" in err and "config key 'num_batches' is 'rl.num_batches'" in err
    assert "config key 'group_size' is 'rl.group_size'" in err  # the plugin's own flat read of the config
