"""`env: verifiers`: a verifiers environment, loaded as verifiers loads one, trained by RL.

The environments are verifiers_envs.py beside this file (single-turn, multi-turn and with a tool,
of verifiers' own classes, on a two-row dataset made there; no hub downloads), loaded by id as
`vf.load_environment` loads any. The noop model's replies are scripted, so each episode's reward
is known."""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from kitchen.engine.errors import ConfigError
from kitchen.engine.hooks import Hooks
from kitchen.integrations.hubs.verifiers_env import SUPPORTED, check_version
from kitchen.testing import run_on_noop
from recipes.env_rl import RECIPE
from tests.tool_use.test_openai_agent import Captured, check_trained_equals_sampled

# slow: the package takes seconds to import (verifiers, or OpenEnv with gradio), then RL runs
pytestmark = pytest.mark.slow
pytest.importorskip("verifiers", reason=f"env: verifiers needs {SUPPORTED}")
try:
    check_version(version("verifiers"))
except ValueError:  # the hubs extra's 0.4 line: tests/env_hubs/test_hub_config.py checks its refusal
    pytest.skip(f"env: verifiers runs {SUPPORTED}, not verifiers {version('verifiers')}", allow_module_level=True)


def scripted(prompt: str) -> str:
    """Single: right on "12 + 30", wrong on "7 + 9". Multi: wrong, then the hint's number. Tool:
    an `add` call, then the tool's result."""
    if "Hint: it is " in prompt:
        return prompt.rsplit("Hint: it is ", 1)[1].split(".")[0]
    if "<tool_response>" in prompt:
        return prompt.rsplit("<tool_response>\n", 1)[1].split("\n</tool_response>")[0]
    if '"name": "add"' in prompt:
        a, b = (12, 30) if "12 + 30" in prompt else (7, 9)
        return f'<tool_call>\n{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'
    return "42" if "12 + 30" in prompt else "15"


def run(tmp_path: Path, kind: str, *extra: str, hooks: Sequence[Hooks] = ()) -> Any:
    return run_on_noop(
        RECIPE,
        "env=verifiers",
        "env.environment=verifiers_envs",
        f"env.load_args.kind={kind}",
        "renderer=qwen3_instruct",
        "sampling.max_tokens=48",
        "rl.group_size=2",
        "rl.groups_per_batch=2",
        "rl.num_batches=2",
        "warm_start.steps=0",
        "eval.every=0",
        *extra,
        log_path=tmp_path / kind,
        replies=scripted,
        hooks=hooks,
    )


def test_a_single_turn_environment_is_rewarded_by_its_rubric(tmp_path: Path) -> None:
    result = run(tmp_path, "single")
    assert result.column("env/all/reward/total") == [0.5, 0.5]  # one row of two answered right
    assert result.column("env/all/verifiers/exact_answer") == [0.5, 0.5]
    assert result.column("env/all/agent/calls") == [1.0, 1.0]


def test_a_multi_turn_environment_runs_its_turns(tmp_path: Path) -> None:
    result = run(tmp_path, "multi")
    assert result.column("env/all/verifiers/num_turns") == [1.5, 1.5]  # right at once, or after the hint
    assert result.column("env/all/reward/total") == [1.0, 1.0]


def test_a_tool_environment_gets_the_models_calls_as_tool_calls(tmp_path: Path) -> None:
    """...and each episode's two calls train as one datum of exactly the tokens sampled."""
    captured = Captured()
    result = run(tmp_path, "tool", hooks=[captured])
    assert result.column("env/all/verifiers/total_tool_calls") == [1.0, 1.0]
    assert result.column("env/all/reward/total") == [1.0, 1.0]
    assert result.column("env/all/agent/calls") == [2.0, 2.0]
    assert check_trained_equals_sampled(captured, datums_per_episode=1) == 8


def test_an_unknown_environment_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no verifiers environment 'no-such-env'"):
        run_on_noop(RECIPE, "env=verifiers", "env.environment=no-such-env", log_path=tmp_path)
