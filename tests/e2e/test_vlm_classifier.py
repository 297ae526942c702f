"""The image-classification-by-chat recipe learns on the embedded tiny vision-language model."""

from __future__ import annotations

from pathlib import Path

import pytest

from kitchen.engine.runs.metrics import read_metrics
from recipes.data import shipped_data
from tests.helpers import run_cli

ACCURACY_EVAL = (
    "eval.tasks=[{task: jsonl, name: classes, every: 12, limit: 15, temperature: 0.0, max_tokens: 4, "
    f"settings: {{dataset: {shipped_data('vlm_classifier/test.jsonl')}, grader: exact}}}}]"
)


@pytest.mark.slow
def test_vlm_classifier_learns_the_colours_of_held_out_pictures(tmp_path: Path) -> None:
    # two epochs of 6 steps; the untrained model answers none (its replies are random tokens)
    result = run_cli(
        "run", "vlm_classifier", f"log_path={tmp_path}", "data.num_epochs=2", "eval.every=0", ACCURACY_EVAL
    )
    assert result.returncode == 0, result.stderr
    rows = read_metrics(tmp_path / "metrics.jsonl")
    first, last = rows[0]["train_mean_nll"], rows[-1]["train_mean_nll"]
    assert last < first - 1.5, f"train NLL fell only from {first:.3f} to {last:.3f}"
    accuracy = [row["eval/classes/accuracy"] for row in rows if "eval/classes/accuracy" in row]
    assert accuracy[-1] >= 0.8, f"held-out accuracy {accuracy}"
