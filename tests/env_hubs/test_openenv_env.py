"""`env: openenv`: an OpenEnv environment trained by RL, in-process and behind OpenEnv's own
server on 127.0.0.1 (reached with OpenEnv's client over WebSocket).

The environment is openenv_guess.py beside this file, of OpenEnv's own base classes (no hub
download): guess a number from "higher"/"lower" replies, reward 1 on the step that finds it. The noop model's replies
are scripted (its first guess is 5, then it reads the hint), so each episode's path is known."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kitchen.engine.errors import ConfigError
from kitchen.testing import run_on_noop
from recipes.env_rl import RECIPE

# slow: the package takes seconds to import (verifiers, or OpenEnv with gradio), then RL runs
pytestmark = pytest.mark.slow
pytest.importorskip("openenv", reason="env: openenv needs the hubs extra: bash scripts/setup_hubs.sh")


def scripted(prompt: str) -> str:
    """5, then 6 after "Higher.", then 7 after a second "Higher."; "five" when asked for a word."""
    if "Say it in words" in prompt:
        return "five"
    return str(5 + len(re.findall(r"Higher\.", prompt)))


def run(tmp_path: Path, *extra: str) -> Any:
    return run_on_noop(
        RECIPE,
        "env=openenv",
        "env.environment=openenv_guess:GuessEnvironment",
        "renderer=qwen3_instruct",
        "sampling.max_tokens=8",
        "rl.group_size=2",
        "rl.groups_per_batch=2",
        "rl.num_batches=2",
        "warm_start.steps=0",
        "eval.every=0",
        *extra,
        log_path=tmp_path / "run",
        replies=scripted,
    )


@pytest.mark.parametrize("mode", ["in_process", "server"])
def test_an_openenv_environment_is_played_to_its_reward(tmp_path: Path, mode: str) -> None:
    result = run(tmp_path, f"env.mode={mode}", "env.max_turns=4")
    assert result.column("env/all/reward/total") == [1.0, 1.0]
    turns = result.column("env/all/openenv/turns")
    assert all(2.0 <= t <= 3.0 for t in turns)  # 5, 6 (found) or 5, 6, 7 (found)
    assert result.column("env/all/openenv/invalid_actions") == [0.0, 0.0]


def test_a_reply_that_is_not_a_valid_action_is_answered_and_counted(tmp_path: Path) -> None:
    result = run(tmp_path, "env.max_turns=2", "env.system_prompt=Say it in words.")
    assert result.column("env/all/openenv/invalid_actions") == [2.0, 2.0]
    assert result.column("env/all/reward/total") == [0.0, 0.0]


def test_an_environment_that_is_not_an_openenv_environment_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not an openenv Environment"):
        run_on_noop(RECIPE, "env=openenv", "env.environment=openenv_guess:GuessAction", log_path=tmp_path)
