"""`kitchen eval` on a run directory writes under `RUN_DIR/evals/`, and `kitchen report` shows it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kitchen.apps.cli import main
from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe


@pytest.fixture(scope="module")
def rl_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    recipe = get_recipe("math_rl")
    folder = tmp_path_factory.mktemp("runs") / "math_rl"
    overrides = [
        "backend=noop",
        f"log_path={folder}",
        "rl.num_batches=2",
        "warm_start.steps=0",
        "rl.groups_per_batch=2",
    ]
    return run_recipe(recipe, load_config(recipe.config_cls, None, overrides), progress=False).path


def test_a_run_keeps_its_evaluations_and_the_report_shows_them(
    rl_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(rl_run), "--tasks", "arithmetic", "--limit", "3", "--samples", "2"]) == 0
    printed = capsys.readouterr().out
    (folder,) = (rl_run / "evals").iterdir()
    assert f"results written: {folder}" in printed
    results = json.loads((folder / "results.json").read_text())
    assert results["checkpoint"] == "final" and results["target"] == str(rl_run)
    # the run sampled 8 tokens at temperature 1; the evaluation does the same unless told otherwise
    assert results["config"]["tasks"]["arithmetic"]["max_tokens"] == 8
    accuracy = next(row for row in results["results"] if row["metric"] == "accuracy")

    assert main(["report", str(rl_run)]) == 0
    page = (rl_run / "report.html").read_text(encoding="utf-8")
    section = page[page.index('<section id="evals">') :]
    section = section[: section.index("</section>")]
    assert '<a href="#evals">Evaluations</a>' in page
    assert folder.name in section and "checkpoint final" in section
    assert re.search(rf"<td>arithmetic</td><td>accuracy</td><td class=\"num\">{accuracy['value']:.4f}</td>", section)
    assert "maj@2" in section and "pass@2" in section
