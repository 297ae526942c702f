"""`env: verifiers`: a verifiers 0.4 taskset, loaded as verifiers loads one, trained by RL.

The taskset is verifiers_tasksets.py beside this file (of verifiers' own classes, two tasks made
there; no hub downloads), loaded by id as `vf.import_taskset` loads any. Each episode is verifiers'
chat program run by uv in a subprocess, its packages installed from the local index that
scripts/setup_hubs.sh downloads (no network here beyond 127.0.0.1). The noop model's replies are
scripted, so each episode's reward is known."""

from __future__ import annotations

import os
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from kitchen.engine.errors import ConfigError
from kitchen.engine.hooks import Hooks
from kitchen.engine.runner import StageFailure
from kitchen.integrations.hubs.verifiers_env import SUPPORTED, check_version
from kitchen.testing import run_on_noop
from recipes.env_rl import RECIPE
from tests.tool_use.test_openai_agent import Captured, check_trained_equals_sampled

# slow: verifiers takes seconds to import, and each episode starts a uv-run program
pytestmark = pytest.mark.slow
pytest.importorskip("verifiers", reason=f"env: verifiers needs {SUPPORTED}")
try:
    check_version(version("verifiers"))
except ValueError as refused:  # tests/env_hubs/test_hub_config.py checks the refusal
    pytest.skip(str(refused), allow_module_level=True)
INDEX = Path(__file__).parents[2] / ".venv" / "verifiers-index"
if not INDEX.is_dir():
    pytest.skip(
        f"no {INDEX}: run scripts/setup_hubs.sh (it downloads the harness program's packages)",
        allow_module_level=True,
    )


def scripted(prompt: str) -> str:
    """Without tools: right on "12 + 30", wrong on "7 + 9". With the `add` tool: its call, then
    the tool's result. After a hint: the hint's number."""
    if "Hint: it is " in prompt:
        return prompt.rsplit("Hint: it is ", 1)[1].split(".")[0]
    if "<tool_response>" in prompt:
        return prompt.rsplit("<tool_response>\n", 1)[1].split("\n</tool_response>")[0]
    if '"name": "add"' in prompt:
        a, b = (12, 30) if "12 + 30" in prompt else (7, 9)
        return f'<tool_call>\n{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'
    return "42" if "12 + 30" in prompt else "15"


def run(tmp_path: Path, *extra: str, hooks: Sequence[Hooks] = ()) -> Any:
    return run_on_noop(
        RECIPE,
        "env=verifiers",
        "env.taskset=verifiers_tasksets",
        f"env.package_index={INDEX}",
        "renderer=qwen3_instruct",
        "sampling.max_tokens=48",
        "rl.group_size=2",
        "rl.groups_per_batch=2",
        "rl.num_batches=2",
        "warm_start.steps=0",
        "eval.every=0",
        *extra,
        log_path=tmp_path / "run",
        replies=scripted,
        hooks=hooks,
    )


def test_a_taskset_is_rewarded_by_its_tasks_reward_and_trains_what_was_sampled(tmp_path: Path) -> None:
    captured = Captured()
    result = run(tmp_path, hooks=[captured])
    assert result.column("env/all/reward/total") == [0.5, 0.5]  # one task of two answered right
    assert result.column("env/all/verifiers/exact_answer") == [0.5, 0.5]
    assert result.column("env/all/agent/calls") == [1.0, 1.0]
    assert check_trained_equals_sampled(captured, datums_per_episode=1) == 8


def test_a_failed_episode_stops_the_run_with_verifiers_error(tmp_path: Path) -> None:
    with pytest.raises(StageFailure, match=r"the verifiers episode failed: TaskError: .*this task's scoring is broken"):
        run(tmp_path, "env.taskset_args.broken=true")


def test_an_unknown_taskset_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no verifiers taskset 'no-such-taskset'"):
        run_on_noop(RECIPE, "env=verifiers", "env.taskset=no-such-taskset", log_path=tmp_path)


def test_the_tasksets_env_runs_its_turns(tmp_path: Path) -> None:
    """The taskset's own Env (a hint after a wrong reply): right at once, or after the hint."""
    captured = Captured()
    result = run(tmp_path, "env.taskset_args.hints=true", hooks=[captured])
    assert result.column("env/all/reward/total") == [1.0, 1.0]
    assert result.column("env/all/agent/calls") == [1.5, 1.5]
    assert check_trained_equals_sampled(captured, datums_per_episode=1) == 8


def test_a_taskset_with_tools_gets_the_models_calls_as_tool_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verifiers starts the taskset's MCP server as `python -m verifiers_tasksets`; each episode's
    two calls (the tool call, then the answer) train as one datum of exactly the tokens sampled."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    captured = Captured()
    result = run(tmp_path, "env.taskset_args.tools=true", hooks=[captured])
    assert result.column("env/all/reward/total") == [1.0, 1.0]
    assert result.column("env/all/agent/calls") == [2.0, 2.0]
    assert check_trained_equals_sampled(captured, datums_per_episode=1) == 8
