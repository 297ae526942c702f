"""`kitchen report` and `kitchen runs` through the CLI entry point."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kitchen.apps.cli import main
from kitchen.apps.report.runs import headline
from tests.report.conftest import copy_run, crash


def test_report_writes_into_the_run_dir(sl_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = copy_run(sl_run, tmp_path / "run")
    assert main(["report", str(run)]) == 0
    assert (run / "report.html").stat().st_size > 0
    assert f"report written: {run / 'report.html'}" in capsys.readouterr().out


def test_report_out(sl_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "nested" / "r.html"
    assert main(["report", str(sl_run), "--out", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("command", ["report", "runs"])
def test_bad_folder_is_one_line_and_exit_2(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "file.txt"
    target.write_text("not a run")
    assert main([command, str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kitchen: error: ") and err.count("\n") == 1 and str(target) in err


def test_runs_lists_newest_first_with_headlines(
    runs_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "runs"
    for age, name in enumerate(["math_rl", "dpo", "sl_basic"]):
        run = copy_run(runs_root / name, folder / name)
        if name == "math_rl":
            crash(run)
        for path in run.rglob("*"):
            os.utime(path, (1_700_000_000 - age * 100, 1_700_000_000 - age * 100))
    (folder / "not_a_run").mkdir()
    assert main(["runs", str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["RUN", "RECIPE", "STATUS", "STEPS", "UPDATED", "HEADLINE"]
    assert [line.split()[0] for line in lines[1:]] == ["math_rl", "dpo", "sl_basic"]
    rl, dpo, sl = lines[1:]
    assert "interrupted" in rl and " 4 " in rl and "reward" in rl  # old files, no end event
    assert "finished" in dpo and "accuracy" in dpo and "(eval " in dpo
    assert "finished" in sl and "nll" in sl


def test_runs_of_an_empty_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", str(tmp_path)]) == 0
    assert "no runs under" in capsys.readouterr().out


def test_headline_picks_by_keys() -> None:
    assert headline([{"step": 0, "env/all/reward/total": 0.25}]) == "reward 0.25"
    assert headline([{"step": 0, "train_mean_nll": 2.0}, {"step": 1, "eval/nll": 2.5}]) == "nll 2 (eval 2.5)"
    assert headline([{"step": 0, "other": 1.0}]) == "-"


def test_runs_skips_a_run_whose_config_is_not_utf8(
    runs_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "runs"
    copy_run(runs_root / "sl_basic", folder / "good")
    bad = copy_run(runs_root / "dpo", folder / "bad")
    (bad / "config.yaml").write_bytes(b"seed: 1\nmodel_name: \xff\xfe\n")
    assert main(["runs", str(folder)]) == 0
    captured = capsys.readouterr()
    assert [line.split()[0] for line in captured.out.splitlines()[1:]] == ["good"]
    assert f"warning: skipped {bad}: config.yaml not UTF-8 text" in captured.err


def test_report_of_a_run_whose_config_is_an_alias_bomb(sl_run: Path, tmp_path: Path) -> None:
    from tests.safety.test_bad_inputs import BOMB

    run = copy_run(sl_run, tmp_path / "run")
    (run / "config.yaml").write_text(BOMB)
    assert main(["report", str(run)]) == 0
    assert "No readable config.yaml (invalid YAML: expands to more than" in (run / "report.html").read_text()
