"""Evaluation during training (`evals:` and `best_checkpoint` in any recipe's config), on the noop
backend with a scripted fake model: metrics rows, the best-checkpoint pointer and its protection
from pruning, `--checkpoint best`, and config and grader errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kitchen.apps.cli import main
from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError, DataError
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runner import StageFailure
from kitchen.engine.runs.best_checkpoint import BEST_FILE
from kitchen.engine.runs.checkpoints import read_records
from kitchen.engine.workflow import Loop, _iter_nodes, _iter_stages
from kitchen.families.common.checkpoint import SaveCheckpoint
from kitchen.families.evaluation.during_training import FinishEvals, StartEvals
from kitchen.families.evaluation.target import resolve_target
from kitchen.testing import RunResult
from recipes.math_rl import Config as MathConfig

RL = ("warm_start.steps=0", "rl.groups_per_batch=2", "rl.group_size=2", "eval.every=0", "env.max_operand=3")
GRADERS = "tests.eval.graders_for_tests"
GRADER = f"{GRADERS}:by_length"


def right_answers(prompt: str) -> str:
    """The fake model answers every addition correctly."""
    found = re.findall(r"What is (\d+) \+ (\d+)\?", prompt)
    x, y = found[-1]
    return f" {int(x) + int(y)}"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """Prompts for the `jsonl` task."""
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"Say {n}.", "answer": str(n)}) + "\n" for n in range(4)))
    return path


def raw_rows(run: RunResult) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]


def test_evals_log_eval_task_metric_after_every_n_steps_and_the_last(kitchen_run: Any) -> None:
    run = kitchen_run(
        "math_rl",
        *RL,
        "rl.num_batches=5",
        "eval.tasks=[{task: arithmetic, every: 2, limit: 6, temperature: 0.0}]",
        replies=right_answers,
    )
    rows = raw_rows(run)
    # one row per step, in step order: a background eval holds its step's row until it is in
    assert [row["step"] for row in rows] == [0, 1, 2, 3, 4]
    evaluated = {row["step"]: row["eval/arithmetic/accuracy"] for row in rows if "eval/arithmetic/accuracy" in row}
    assert evaluated == {1: 1.0, 3: 1.0, 4: 1.0}  # after steps 2, 4 and the last (5)
    assert all("env/all/reward/total" in rows[step] for step in evaluated)  # the same row as the step's own
    samples = (run.path / "evals" / "training" / "arithmetic" / "000002.jsonl").read_text().splitlines()
    assert len(samples) == 6
    assert all(json.loads(line)["correct"] for line in samples)


def test_wrong_answers_score_zero_and_waiting_evals_match_background_ones(kitchen_run: Any) -> None:
    def wrong(prompt: str) -> str:
        return " 99"

    evals = "eval.tasks=[{task: arithmetic, every: 1, limit: 4, background: %s}]"
    background = kitchen_run("math_rl", *RL, "rl.num_batches=2", evals % "true", replies=wrong)
    waiting = kitchen_run("math_rl", *RL, "rl.num_batches=2", evals % "false", replies=wrong)
    assert background.column("eval/arithmetic/accuracy") == [0.0, 0.0]
    assert waiting.column("eval/arithmetic/accuracy") == [0.0, 0.0]


def test_the_best_checkpoint_pointer_is_what_checkpoint_best_evaluates(kitchen_run: Any, data: Path) -> None:
    run = kitchen_run(
        "math_rl",
        *RL,
        "rl.num_batches=6",
        "checkpoint.save_every=1",
        f"eval.tasks=[{{task: jsonl, name: lengthy, every: 1, settings: {{dataset: '{data}', grader: '{GRADER}'}}}}]",
        "eval.best_checkpoint={metric: eval/lengthy/mean_reward, mode: max}",
    )
    values = run.column("eval/lengthy/mean_reward")
    assert len(values) == 6 and len(set(values)) > 1  # the pseudo-random replies change as the weights do
    best_step = max(range(6), key=lambda s: (values[s], s))  # ties go to the later step
    pointer = json.loads((run.path / BEST_FILE).read_text())
    assert pointer["name"] == f"{best_step + 1:06d}"
    assert pointer["value"] == values[best_step]
    assert pointer["state_path"] == next(r.state_path for r in run.checkpoints if r.name == pointer["name"])
    target = resolve_target(str(run.path), checkpoint="best")
    assert target.record is not None and target.record.name == pointer["name"]


def test_supervised_steps_in_flight_and_evals_share_the_steps_rows(kitchen_run: Any, data: Path) -> None:
    """sl_basic keeps a train step in flight while evals run in the background: both hold the
    step's row, which is written once, with both."""
    evals = f"eval.tasks=[{{task: jsonl, every: 2, settings: {{dataset: '{data}', grader: '{GRADER}'}}}}]"
    run = kitchen_run("sl_basic", "data.max_steps=3", "eval.every=0", evals)
    rows = raw_rows(run)
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert [("eval/jsonl/accuracy" in row, "train_mean_nll" in row) for row in rows] == [
        (False, True),
        (True, True),  # after step 2
        (True, True),  # after the last
    ]


@pytest.mark.parametrize(
    ("recipe", "overrides"),
    [
        ("math_rl", []),
        ("math_rl", ["rl.stream_minibatch={num_minibatches: 2}"]),
        ("math_rl", ["rl.async_config={max_steps_off_policy: 1}"]),
        ("sl_basic", []),
        ("dpo", []),
    ],
)
def test_every_step_loop_starts_evals_after_its_step_and_waits_for_them_after(
    recipe: str, overrides: list[str]
) -> None:
    found = get_recipe(recipe)
    config = load_config(found.config_cls, None, ["eval.tasks=[{task: arithmetic, every: 3}]", *overrides])
    workflow = found.workflow(config)
    stages = [type(stage) for stage in workflow.stages()]
    (loop,) = [node for node in _iter_nodes(workflow.steps) if isinstance(node, Loop) and node.step]
    assert StartEvals in [type(stage) for stage in _iter_stages(loop.body)]
    assert stages.index(FinishEvals) > stages.index(StartEvals)
    assert stages.index(FinishEvals) < max(i for i, kind in enumerate(stages) if kind is SaveCheckpoint)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval.tasks=[{task: arithmetc, every: 2}]", "unknown task 'arithmetc'; did you mean 'arithmetic'?"),
        ("eval.tasks=[{task: arithmetic, every: 2, settings: {max_operandd: 3}}]", "has no setting 'max_operandd'"),
        ("eval.tasks=[{task: arithmetic, every: 0}]", "eval.tasks.0.every"),
        ("eval.tasks=[{task: jsonl, every: 2, settings: {dataset: x.jsonl}}]", "task 'jsonl': grader: Field required"),
        (
            f"eval.tasks=[{{task: jsonl, every: 2, settings: {{dataset: x.jsonl, grader: '{GRADERS}:gone'}}}}]",
            "grader 'tests.eval.graders_for_tests:gone': module 'tests.eval.graders_for_tests' has no 'gone'",
        ),
        (
            "eval.tasks=[{task: arithmetic, every: 2}, {task: arithmetic, every: 3}]",
            "two eval tasks are named 'arithmetic'",
        ),
        (
            "eval.tasks=[{task: arithmetic, every: 2}]\neval.best_checkpoint={metric: eval/arithmetc/accuracy}",
            "did you mean 'arithmetic'?",
        ),
    ],
)
def test_bad_evals_config_is_a_config_error_naming_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(MathConfig, None, override.split("\n"))


def test_a_grader_that_raises_stops_the_run_naming_grader_and_item(kitchen_run: Any, data: Path) -> None:
    evals = f"eval.tasks=[{{task: jsonl, every: 1, settings: {{dataset: '{data}', grader: '{GRADERS}:explodes'}}}}]"
    raised = r"grader .*:explodes on .*prompts.jsonl line 1 raised ZeroDivisionError"
    with pytest.raises(StageFailure, match=raised) as failure:
        kitchen_run("math_rl", *RL, "rl.num_batches=2", evals)
    assert failure.value.is_user_error


@pytest.mark.slow
def test_on_the_local_backend_the_last_eval_is_kitchen_eval_of_the_final_checkpoint(tmp_path: Path, data: Path) -> None:
    """The tiny model fine-tuned by sl_basic: the eval after the last step samples the same replies
    as `kitchen eval RUN --tasks arithmetic` on the final checkpoint (same weights, settings,
    seeds), and keep_last=1 keeps the best checkpoint's files while deleting the other older ones'."""
    recipe = get_recipe("sl_basic")
    lengthy = (
        f"{{task: jsonl, name: lengthy, every: 1, max_tokens: 8, settings: {{dataset: '{data}', grader: '{GRADER}'}}}}"
    )
    overrides = [
        "data.max_steps=4",
        "data.max_length=64",
        "eval.every=0",
        "checkpoint.save_every=1",
        "checkpoint.keep_last=1",
    ]
    overrides += [
        f"log_path={tmp_path / 'run'}",
        f"eval.tasks=[{{task: arithmetic, every: 1, limit: 8, max_tokens: 8}}, {lengthy}]",
    ]
    overrides += ["eval.best_checkpoint={metric: eval/lengthy/mean_reward, mode: max}"]
    run = run_recipe(recipe, load_config(recipe.config_cls, None, overrides), progress=False).path
    out = tmp_path / "eval"
    assert (
        main(["eval", str(run), "--tasks", "arithmetic", "--limit", "8", "--max-tokens", "8", "--out", str(out)]) == 0
    )
    evaluated = (out / "samples" / "arithmetic.jsonl").read_text().splitlines()
    during = (run / "evals" / "training" / "arithmetic" / "000004.jsonl").read_text().splitlines()
    assert [json.loads(line)["response"] for line in evaluated] == [json.loads(line)["response"] for line in during]
    pointer = json.loads((run / BEST_FILE).read_text())
    assert pointer["name"] != "000004"  # the case under test: the best is not the newest
    on_disk = {r.name for r in read_records(run / "checkpoints.jsonl") if r.state_path and Path(r.state_path).exists()}
    assert on_disk == {pointer["name"], "000004", "final"}


def test_a_missing_eval_data_file_stops_the_run_before_it_starts(kitchen_run: Any, tmp_path: Path) -> None:
    gone = tmp_path / "gone.jsonl"
    evals = f"eval.tasks=[{{task: jsonl, every: 5, settings: {{dataset: '{gone}', grader: math}}}}]"
    with pytest.raises(DataError, match=re.escape(f"eval.tasks.0 (jsonl): dataset {gone}: no such file")):
        kitchen_run("math_rl", *RL, "rl.num_batches=2", evals)
    assert not (tmp_path / "run0" / "metrics.jsonl").exists()


def test_from_the_command_line_bad_evals_exit_2_with_one_line(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["run", "math_rl", "backend=noop", *RL, "rl.num_batches=2", f"log_path={tmp_path / 'run'}"]
    assert main([*base, "eval.tasks=[{task: arithmetc, every: 1}]"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'arithmetic'?" in err and "Traceback" not in err
    explodes = f"eval.tasks=[{{task: jsonl, every: 1, settings: {{dataset: '{data}', grader: '{GRADERS}:explodes'}}}}]"
    assert main([*base, explodes]) == 2
    err = capsys.readouterr().err
    assert "explodes on" in err and "raised ZeroDivisionError" in err and "Traceback" not in err
    done = tmp_path / "done"
    assert (
        main(["run", "math_rl", "backend=noop", *RL, "rl.num_batches=2", "checkpoint.save_every=1", f"log_path={done}"])
        == 0
    )
    assert main(["eval", str(done), "--checkpoint", "best", "--tasks", "arithmetic"]) == 2
    assert "no best checkpoint: no saved step checkpoint was evaluated" in capsys.readouterr().err
