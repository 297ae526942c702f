"""CLI ergonomics: --config by shipped name, kitchen cp, --debug anywhere, recipe files, keys, and
the progress display (phases, final metrics, summary)."""

from __future__ import annotations

import asyncio
import importlib.util
import re
from pathlib import Path

import pytest

from kitchen.apps.cli import main
from kitchen.engine import launch
from kitchen.engine.config.run import RunConfig
from kitchen.engine.context import Context
from kitchen.engine.errors import ConfigError
from kitchen.engine.hooks import ProgressHook, _summary, report_progress
from kitchen.engine.runner import Runner
from kitchen.engine.runs.metrics import MetricsRecorder, read_metrics
from kitchen.engine.stage import Stage
from kitchen.engine.workflow import Loop, Workflow
from tests.helpers import REPO


def test_config_by_shipped_name_or_relative_path_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "dpo", "--config", "dpo"]) == 0
    assert main(["validate", "math_rl", "--config", "math_rl_async.yaml"]) == 0
    (tmp_path / "mine.yaml").write_text("backend: noop\ndata:\n  batch_size: 3\n")
    assert main(["validate", "sl_basic", "--config", "mine.yaml"]) == 0
    capsys.readouterr()
    assert main(["validate", "sl_basic", "--config", "nope"]) == 2
    err = capsys.readouterr().err
    assert "config file not found: nope" in err and "sl_basic" in err


def test_cp_copies_a_shipped_config_and_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["cp", "math_rl_async", "."]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "math_rl_async.yaml").is_file()
    assert "kitchen run math_rl --config" in out
    assert main(["cp", "dpo", "edited.yaml"]) == 0
    assert (tmp_path / "edited.yaml").read_text() == (REPO / "recipes/configs/dpo.yaml").read_text()
    assert main(["cp", "dpo", "edited.yaml"]) == 2
    assert "already exists" in capsys.readouterr().err


def test_debug_is_accepted_anywhere_on_the_line() -> None:
    for argv in (
        ["--debug", "validate", "sl_basic", "batch_sise=3"],
        ["validate", "--debug", "sl_basic", "batch_sise=3"],
        ["validate", "sl_basic", "batch_sise=3", "--debug"],
    ):
        with pytest.raises(ConfigError, match="batch_sise"):
            main(argv)


def test_keys_lists_nested_sections_with_types_and_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "math_rl"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^optimizer\.learning_rate\s+float\s+0\.001", out, re.M)
    assert re.search(r"^rl\.async_config\.max_steps_off_policy\s+int\s+required\s+admission bound", out, re.M)
    assert re.search(r"^local\.device\s+str \| None\s+None\s+torch device", out, re.M)
    assert re.search(r"^algorithm\.loss_fn\s+str\s+'importance_sampling'", out, re.M)
    assert re.search(r"^env\.max_operand\s+int\s+4\s+.*\(arithmetic\)", out, re.M)  # the choice's members
    assert re.search(r"^env\.dataset\s+str\s+.*\(gsm8k\)", out, re.M)
    assert main(["show", "sl_basic", "--keys"]) == 0
    assert re.search(r"^data\.batch_size\s+int\s+32", capsys.readouterr().out, re.M)


def test_a_recipe_file_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "my_recipe.py"
    file.write_text(
        "from kitchen.engine.recipe import Recipe\n"
        "from recipes.sl_basic import Config, workflow\n"
        "RECIPE = Recipe('mine', 'my own recipe', Config, workflow)\n"
    )
    log = tmp_path / "run"
    assert main(["run", str(file), "backend=noop", "data.max_steps=2", "data.batch_size=4", f"log_path={log}"]) == 0
    assert len(read_metrics(log / "metrics.jsonl")) == 2
    out = capsys.readouterr().out
    assert "done: 2 steps" in out and f"kitchen report {log}" in out
    (tmp_path / "empty.py").write_text("x = 1\n")
    assert main(["validate", str(tmp_path / "empty.py")]) == 2
    assert "defines no RECIPE" in capsys.readouterr().err


class Cfg:
    pass


class Train(Stage):
    async def run(self, ctx: Context) -> None:
        ctx.record({"train_mean_nll": 2.0 - ctx.step})


class FinalEval(Stage):
    async def run(self, ctx: Context) -> None:
        ctx.record({"eval/nll": 0.5})


def _run(hook: ProgressHook) -> None:
    workflow = Workflow(
        "p", [Train(name="setup_phase"), Loop("steps", over="n", step=True, body=[Train()]), FinalEval()]
    )
    ctx = Context(config=Cfg(), ports={}, state={"n": 3}, metrics=MetricsRecorder())  # type: ignore[arg-type]
    asyncio.run(Runner(workflow, [hook]).run(ctx))


def test_progress_names_phases_labels_final_metrics_and_summarises(capsys: pytest.CaptureFixture[str]) -> None:
    _run(ProgressHook(interactive=False))
    lines = [re.sub(r" eta \S+$", "", line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0] == "[setup_phase]"
    assert "step 3/3 train_mean_nll=0" in lines
    assert "[final_eval]" in lines
    assert not any(line.startswith("step 4/") for line in lines)
    assert "final eval/nll=0.5" in lines
    assert lines[-1].startswith("done: 3 steps in ") and lines[-1].endswith("eval/nll=0.5")


def test_interactive_progress_runs(capsys: pytest.CaptureFixture[str]) -> None:
    _run(ProgressHook(interactive=True))
    out = capsys.readouterr().out
    assert "final eval/nll=0.5" in out and "done: 3 steps" in out


def test_custom_workflow_example_keeps_some_examples(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("custom_workflow_obs", REPO / "examples" / "custom_workflow.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run_dir = module.main(["backend=noop", "data.max_steps=5", "data.batch_size=8", f"log_path={tmp_path}"])
    rows = read_metrics(run_dir.metrics)
    dropped = [row["filter/dropped"] for row in rows]
    assert all(d < 8 for d in dropped) and sum(dropped) > 0


class LongPhase(Stage):
    async def run(self, ctx: Context) -> None:
        for done in range(1, 6):
            report_progress(ctx, "long_phase", done, 5, {"nll": 3.0 - done / 2})


def test_a_long_stage_reports_its_progress(capsys: pytest.CaptureFixture[str]) -> None:
    ctx = Context(config=Cfg(), ports={}, state={}, metrics=MetricsRecorder())  # type: ignore[arg-type]
    asyncio.run(Runner(Workflow("p", [LongPhase()]), [ProgressHook(interactive=False, progress_every_s=0)]).run(ctx))
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "[long_phase] 1/5 nll=2.5" and re.fullmatch(r"\[long_phase\] 2/5 nll=2 eta \d+s", lines[2])
    assert lines[5] == "[long_phase] 5/5 nll=0.5"
    ctx = Context(config=Cfg(), ports={}, state={}, metrics=MetricsRecorder())  # type: ignore[arg-type]
    asyncio.run(Runner(Workflow("p", [LongPhase()]), [ProgressHook(interactive=False)]).run(ctx))
    shown = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[long_phase] ")]
    assert [line.split()[1] for line in shown] == ["1/5", "5/5"]  # at most every 10 s, and the end
    ctx = Context(config=Cfg(), ports={}, state={}, metrics=MetricsRecorder())  # type: ignore[arg-type]
    asyncio.run(Runner(Workflow("p", [LongPhase()]), [ProgressHook(interactive=True)]).run(ctx))


def test_rl_warm_start_is_not_silent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The warm start used to print `[warm_start]` once and nothing for its whole length (655 s)."""
    argv = ["run", "math_rl", "backend=noop", "warm_start.steps=3", "rl.num_batches=1", "eval.every=0"]
    assert main([*argv, f"log_path={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "[warm_start] 1/3 nll=" in out and "[warm_start] 3/3 nll=" in out


def test_each_family_shows_what_its_users_watch() -> None:
    rl = {"step": 0, "env/all/reward/total": 0.5, "env/all/correct": 0.25, "optim/kl_sample_train_v1": 0.001}
    rl["eval/all/reward/total"] = 0.75
    assert _summary(rl) == "reward=0.5 correct=0.25 kl_mismatch=0.001 eval/reward=0.75"
    distill = {"step": 0, "env/all/reward/total": 0.0, "teacher_kl": 0.3, "eval/teacher_kl": 0.4}
    assert _summary(distill) == "teacher_kl=0.3 eval/teacher_kl=0.4"  # its reward is always 0
    assert _summary({"step": 0, "dpo_loss": 0.69, "accuracy": 0.5, "eval/accuracy": 1.0}) == (
        "dpo_loss=0.69 accuracy=0.5 eval/accuracy=1"
    )
    assert _summary({"step": 0, "env/all/pass": 1.0}) == "pass=1"


def test_runs_without_log_path_in_the_same_second_get_their_own_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs started within one second (fast noop runs do) must not resume or refuse each other."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(launch.time, "strftime", lambda fmt: "20260101-000000")
    first = launch.resolve_log_path("math_rl", RunConfig())
    assert first == Path("runs/math_rl-20260101-000000")
    first.mkdir(parents=True)
    second = launch.resolve_log_path("math_rl", RunConfig())
    assert second == Path("runs/math_rl-20260101-000000-2")
    second.mkdir()
    assert launch.resolve_log_path("math_rl", RunConfig()).name == "math_rl-20260101-000000-3"
    assert launch.resolve_log_path("math_rl", RunConfig(log_path="mine")) == Path("mine")
