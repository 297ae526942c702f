"""`kitchen eval` from the command line: results on disk, the summary table, reproducible samples
on the local backend, and bad input as one error line with exit code 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kitchen.apps.cli import main
from kitchen.engine import backends
from kitchen.engine.backends import BackendSpec, backend_specs


def run_eval(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["eval", *args])
    out, err = capsys.readouterr()
    return code, out, err


def samples(out_dir: Path, task: str) -> list[dict[str, object]]:
    lines = (out_dir / "samples" / f"{task}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_results_and_table_on_the_noop_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"say {i}", "answer": str(i)}) + "\n" for i in range(3)))
    out = tmp_path / "out"
    args = ["tiny", "--base", "--backend", "noop", "--tasks", f"arithmetic,{data}", "--samples", "2"]
    args += ["--limit", "5", "--grader", "tests.eval.graders_for_tests:contains_answer", "--out", str(out)]
    code, printed, err = run_eval(args, capsys)
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    rows = {(row["task"], row["metric"]): row for row in results["results"]}
    assert set(rows) == {
        (task, metric)
        for task in ("arithmetic", str(data))
        for metric in ("accuracy", "pass@2", "maj@2", "mean_reward")
    }
    assert rows[("arithmetic", "accuracy")]["n"] == 5 and rows[(str(data), "accuracy")]["n"] == 3
    assert all(row["seed"] == 0 and row["model"] == "tiny" for row in rows.values())
    assert results["config"]["tasks"]["arithmetic"]["samples"] == 2 and results["config"]["backend"] == "noop"
    lines = samples(out, "arithmetic")
    assert len(lines) == 10 and {"prompt", "response", "grade", "reason"} <= set(lines[0])
    assert lines[0]["prompt"] == "user: What is 0 + 0?"
    assert re.search(r"arithmetic +accuracy", printed) and "maj@2" in printed and f"results written: {out}" in printed


@pytest.mark.slow
def test_same_seed_same_samples_on_the_local_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def once(name: str, seed: int) -> list[dict[str, object]]:
        out = tmp_path / name
        args = ["tiny", "--base", "--tasks", "arithmetic", "--limit", "6", "--samples", "2", "--max-tokens", "6"]
        code, _, err = run_eval([*args, "--seed", str(seed), "--out", str(out)], capsys)
        assert code == 0, err
        return samples(out, "arithmetic")

    first, again, other = once("a", 3), once("b", 3), once("c", 4)
    assert first == again
    assert [s["response"] for s in first] != [s["response"] for s in other]


def test_unknown_task_is_one_line_with_a_suggestion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_eval(["tiny", "--base", "--backend", "noop", "--tasks", "arithmetc"], capsys)
    assert code == 2 and "unknown task 'arithmetc'; did you mean 'arithmetic'?" in err and "Traceback" not in err


def test_a_jsonl_task_without_a_grader(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    code, _, err = run_eval(["tiny", "--base", "--backend", "noop", "--tasks", str(data)], capsys)
    assert code == 2 and f"task '{data}' needs a grader" in err


def test_a_grader_that_raises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "hi", "answer": "1"}\n{"prompt": "ho", "answer": "2"}\n')
    args = ["tiny", "--base", "--backend", "noop", "--tasks", str(data), "--out", str(tmp_path / "out")]
    code, _, err = run_eval([*args, "--grader", "tests.eval.graders_for_tests:explodes"], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"grader tests.eval.graders_for_tests:explodes on {data} line 1 raised ZeroDivisionError" in err
    assert not (tmp_path / "out" / "results.json").exists()  # only the plan and journal, for --resume


def test_a_grader_returning_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    args = ["tiny", "--base", "--backend", "noop", "--tasks", str(data), "--out", str(tmp_path / "out")]
    code, _, err = run_eval([*args, "--grader", "tests.eval.graders_for_tests:returns_text"], capsys)
    assert code == 2 and "returned str 'yes'; a grade is a bool, a number or a dict" in err


def test_a_run_without_a_checkpoint_has_nothing_to_sample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("model_name: tiny\nbackend: noop\n")
    (run / "checkpoints.jsonl").write_text("")
    code, _, err = run_eval([str(run), "--tasks", "arithmetic"], capsys)
    assert code == 2 and "no checkpoint recorded in checkpoints.jsonl yet" in err


def test_a_folder_that_is_no_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_eval([str(tmp_path), "--tasks", "arithmetic"], capsys)
    assert code == 2 and "is not a run directory, a checkpoint or a model folder" in err


def test_a_backend_that_cannot_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    noop = backend_specs()["noop"]
    spec = BackendSpec(
        "scorer_only",
        "a backend that trains and scores but does not sample",
        noop.settings,
        noop.create,
        supported_calls=frozenset({"SamplingClient.compute_logprobs"}),
    )
    monkeypatch.setitem(backends._REGISTERED, spec.name, spec)  # registered for this test only
    code, _, err = run_eval(["tiny", "--base", "--backend", "scorer_only", "--tasks", "arithmetic"], capsys)
    assert code == 2
    assert "backend 'scorer_only' cannot sample (SamplingClient.sample unsupported)" in err


def test_sampling_flags_do_not_apply_to_harness_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_eval(["tiny", "--base", "--harness", "lm-eval", "--tasks", "x", "--samples", "4"], capsys)
    assert code == 2 and "--samples does not apply to --harness lm-eval" in err


def test_an_interrupted_evaluation_resumes_from_its_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["tiny", "--base", "--backend", "noop", "--tasks", "arithmetic", "--limit", "4"]
    whole = tmp_path / "whole"
    assert run_eval([*args, "--out", str(whole)], capsys)[0] == 0
    assert json.loads((whole / "plan.json").read_text())["tasks"]["arithmetic"]["limit"] == 4
    # an interruption after two items: their lines (one marked, to show it is reused, not
    # sampled again) and a third line cut off mid-write, without results.json
    cut = tmp_path / "cut"
    (cut / "samples").mkdir(parents=True)
    (cut / "plan.json").write_text((whole / "plan.json").read_text())
    first, second = samples(whole, "arithmetic")[:2]
    kept = {**first, "response": "kept from before", "grade": 0.0, "correct": False, "reason": "marked"}
    torn = json.dumps(samples(whole, "arithmetic")[2])[:30]
    (cut / "samples" / "arithmetic.jsonl").write_text(f"{json.dumps(kept)}\n{json.dumps(second)}\n{torn}")
    code, _, err = run_eval([*args, "--out", str(cut), "--resume"], capsys)
    assert code == 0, err
    resumed = samples(cut, "arithmetic")
    assert resumed == [kept, *samples(whole, "arithmetic")[1:]]  # the rest as an uninterrupted run has them
    results = {row["metric"]: row for row in json.loads((cut / "results.json").read_text())["results"]}
    assert results["accuracy"]["n"] == 4

    code, _, err = run_eval([*args, "--out", str(cut), "--resume"], capsys)
    assert code == 2 and "holds a finished evaluation" in err


def test_resume_refuses_another_plan_and_needs_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "plan.json").write_text(json.dumps({"model": "tiny", "tasks": {"arithmetic": {"limit": 4}}}))
    args = ["tiny", "--base", "--backend", "noop", "--tasks", "arithmetic", "--limit", "3"]
    code, _, err = run_eval([*args, "--out", str(out), "--resume"], capsys)
    assert code == 2 and "was started with other settings (tasks.arithmetic." in err and "Traceback" not in err
    code, _, err = run_eval([*args, "--resume"], capsys)
    assert code == 2 and "--resume needs --out" in err
    code, _, err = run_eval([*args, "--out", str(out)], capsys)
    assert code == 2 and "--resume continues an interrupted evaluation" in err
