"""Small noop-backend runs of each recipe family, made once per test session, and damaged copies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe

RUNS: dict[str, list[str]] = {
    "sl_basic": ["data.max_steps=6", "checkpoint.save_every=3", "eval.every=3", "data.batch_size=8"],
    "dpo": ["data.max_steps=4", "checkpoint.save_every=2", "eval.every=2", "data.batch_size=4", "data.max_length=64"],
    "math_rl": [
        "rl.num_batches=4",
        "checkpoint.save_every=2",
        "eval.every=2",
        "warm_start.steps=0",
        "rl.groups_per_batch=4",
    ],
}

# A transcript whose action tries to run script in the page: the report must show it as text.
HOSTILE_ACTION = "<script>document.title='pwned'</script><b>bold?</b>"


def make_run(name: str, folder: Path) -> Path:
    recipe = get_recipe(name)
    config = load_config(recipe.config_cls, None, ["backend=noop", f"log_path={folder}", *RUNS[name]])
    return run_recipe(recipe, config, progress=False).path


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    for name in RUNS:
        make_run(name, root / name)
    return root


@pytest.fixture(scope="session")
def sl_run(runs_root: Path) -> Path:
    return runs_root / "sl_basic"


@pytest.fixture(scope="session")
def dpo_run(runs_root: Path) -> Path:
    return runs_root / "dpo"


@pytest.fixture(scope="session")
def rl_run(runs_root: Path) -> Path:
    return runs_root / "math_rl"


def copy_run(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("checkpoints", "report.html"))
    return target


def crash(run: Path) -> None:
    """What a killed process leaves: no end event and half a metrics line at the end."""
    events = run / "events.jsonl"
    kept = [line for line in events.read_text().splitlines() if json.loads(line)["event"] != "run.end"]
    events.write_text("".join(line + "\n" for line in kept))
    with (run / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 99, "train_mean_n')


@pytest.fixture
def crashed_run(sl_run: Path, tmp_path: Path) -> Path:
    run = copy_run(sl_run, tmp_path / "crashed")
    crash(run)
    return run


@pytest.fixture
def hostile_rl_run(rl_run: Path, tmp_path: Path) -> Path:
    """The RL run with a script tag in the first trajectory of its last transcript file."""
    run = copy_run(rl_run, tmp_path / "hostile")
    last = sorted((run / "rollouts").glob("step_*.jsonl"))[-1]
    records = [json.loads(line) for line in last.read_text().splitlines()]
    records[0]["turns"][0]["action"] = HOSTILE_ACTION
    last.write_text("".join(json.dumps(record) + "\n" for record in records))
    return run
