"""The rlhf recipe on the noop backend: each phase alone, all three, resume between phases and
inside a phase, and the checks that refuse a phase whose input is missing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.engine.launch import RunDir, run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runner import StageFailure
from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.runs.metrics import read_metrics
from tests.rl_workflow.runs import CrashAfterStep

SMALL = (
    "backend=noop",
    "sft.data.max_steps=3",
    "sft.checkpoint.save_every=2",
    "preference_model.data.max_steps=3",
    "preference_model.judge_eval.pairs=4",
    "preference_model.checkpoint.save_every=2",
    "rl.rl.num_batches=4",
    "rl.rl.groups_per_batch=2",
    "rl.rl.group_size=3",
    "rl.win_rate.prompts=4",
    "rl.checkpoint.save_every=2",
    "rl.eval.every=2",
)


def run(log_path: Path, *overrides: str, hooks: Any = ()) -> RunDir:
    recipe = get_recipe("rlhf")
    config = load_config(recipe.config_cls, None, [*SMALL, f"log_path={log_path}", *overrides])
    return run_recipe(recipe, config, hooks=hooks, progress=False)


def phase_rows(log_path: Path, phase: str) -> list[dict[str, Any]]:
    return read_metrics(log_path / phase / "metrics.jsonl")


def without_times(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted run of all three phases, shared by the tests that read or compare with it."""
    log_path = tmp_path_factory.mktemp("rlhf-whole")
    run(log_path)
    return log_path


def test_all_phases_run_in_their_own_directories(whole: Path) -> None:
    tmp_path = whole
    for phase in ("sft", "preference_model", "rl"):
        records = read_records(tmp_path / phase / "checkpoints.jsonl")
        assert records[-1].name == "final"
        assert records[-1].state_path is not None and f"{phase}-final" in records[-1].state_path
    pm = phase_rows(tmp_path, "preference_model")
    assert "eval/judge_accuracy" in pm[-1] and "eval/judge_position_bias" in pm[-1]
    rl = phase_rows(tmp_path, "rl")
    assert {"env/all/preference/win_rate_in_group", "env/all/preference/ties"} <= set(rl[0])
    assert rl[0]["env/all/reward/total"] == pytest.approx(0.5)  # the tournament hands out one point per game
    assert "eval/win_rate" in rl[-1] and "eval/win_rate_stderr" in rl[-1]
    top = read_metrics(tmp_path / "metrics.jsonl")
    assert {"time/phase_sft", "time/phase_preference_model", "time/phase_rl"} <= set(top[0])
    # phase 3 judged with phase 2's model, and phases 2 and 3 started from phase 1's weights
    rl_events = (tmp_path / "rl" / "events.jsonl").read_text()
    assert "preference_model-final" in rl_events and "sft-final" in rl_events


def test_each_phase_runs_alone(tmp_path: Path) -> None:
    # noop checkpoint paths are relative to the backend's directory, so on noop the earlier
    # phases' checkpoints must be in the same run; on local and tinker any path works
    run(tmp_path, "phase=sft")
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["checkpoints", "sft"]
    run(tmp_path, "phase=preference_model", f"sft_checkpoint={tmp_path / 'sft'}")
    assert (tmp_path / "preference_model").is_dir() and not (tmp_path / "rl").exists()
    run(tmp_path, "phase=rl", f"preference_model_checkpoint={tmp_path / 'preference_model'}")
    for phase in ("sft", "preference_model", "rl"):
        assert read_records(tmp_path / phase / "checkpoints.jsonl")[-1].name == "final"


def test_rl_with_a_rule_judge_needs_no_preference_model(tmp_path: Path) -> None:
    run(tmp_path, "phase=sft")
    run(tmp_path, "phase=rl", "reward_judge=polite_arithmetic")
    assert not (tmp_path / "preference_model").exists()
    assert read_records(tmp_path / "rl" / "checkpoints.jsonl")[-1].name == "final"


def test_a_phase_without_its_input_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StageFailure, match="run phase=sft first"):
        run(tmp_path, "phase=preference_model")


def test_bad_phase_keys_are_refused_when_the_config_loads(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"rl\.num_batchez"):
        run(tmp_path, "rl.num_batchez=3")
    with pytest.raises(ConfigError, match="unknown judge"):
        run(tmp_path, "reward_judge=polite")


def test_resume_between_phases_skips_finished_ones(tmp_path: Path) -> None:
    run(tmp_path, "phase=sft")
    sft_metrics = (tmp_path / "sft" / "metrics.jsonl").read_text()
    run(tmp_path)  # phase=all: sft is done, the other two run
    assert (tmp_path / "sft" / "metrics.jsonl").read_text() == sft_metrics
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "phase.skipped" and e.get("phase") == "sft" for e in events)
    assert read_records(tmp_path / "rl" / "checkpoints.jsonl")[-1].name == "final"


@pytest.mark.parametrize(("phase", "crash_step"), [("preference_model", 1), ("rl", 1)])
def test_resume_inside_a_phase_matches_an_uninterrupted_run(
    tmp_path: Path, whole: Path, phase: str, crash_step: int
) -> None:
    with pytest.raises(StageFailure, match="simulated crash"):
        run(tmp_path / "crashed", hooks=[CrashAfterStep(crash_step) if phase == "sft" else _CrashIn(phase, crash_step)])
    run(tmp_path / "crashed")
    for name in ("sft", "preference_model", "rl"):
        assert without_times(phase_rows(tmp_path / "crashed", name)) == without_times(phase_rows(whole, name))
    resumed = [json.loads(line) for line in (tmp_path / "crashed" / phase / "events.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "run.resume" for e in resumed)


class _CrashIn(CrashAfterStep):
    """Crash after `step` of the sub-run of `phase` only."""

    def __init__(self, phase: str, step: int) -> None:
        super().__init__(step)
        self.phase = phase

    def on_step_end(self, ctx: Any, step: int) -> None:
        if ctx.run_dir is not None and ctx.run_dir.name == self.phase:
            super().on_step_end(ctx, step)
