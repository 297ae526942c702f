"""The report page of finished, crashed and hostile runs: sections, plot data, escaping, caps."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

from kitchen.apps.report.build import write_report
from kitchen.apps.report.html import embed_json, usage_facts
from kitchen.apps.report.samples import Caps, clip, read_transcripts, spread
from kitchen.engine.runs.metrics import read_metrics
from tests.report.conftest import HOSTILE_ACTION, copy_run


def page_data(page: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.DOTALL)
    assert match, "no embedded data"
    return json.loads(match[1])


def report(run: Path, tmp_path: Path, later: float = 0.0) -> str:
    return write_report(run, tmp_path / "report.html", time.time() + later).read_text()


def test_default_output_is_inside_the_run_dir(sl_run: Path, tmp_path: Path) -> None:
    run = copy_run(sl_run, tmp_path / "run")
    assert write_report(run, None, time.time()) == run / "report.html"


def test_supervised_report(sl_run: Path, tmp_path: Path) -> None:
    page = report(sl_run, tmp_path)
    data = page_data(page)
    titles = [chart["title"] for chart in data["charts"]]
    assert "train_mean_nll" in titles and "seconds per step by stage" in titles
    nll = data["charts"][titles.index("train_mean_nll")]
    assert [s["role"] for s in nll["series"]] == ["train", "eval"] and len(nll["series"][0]["x"]) == 6
    assert page.count('<figure class="card chart"') == len(data["charts"])
    assert 'class="badge finished"' in page and "<dd>sl_basic</dd>" in page
    assert "final (step 6)" in page and '<section id="checkpoints">' in page
    # the run's token usage summed over its steps (supervised: trained, and read by held-out evaluation)
    rows = read_metrics(sl_run / "metrics.jsonl")
    prompt, trained = (sum(row[f"usage/{kind}_tokens"] for row in rows) for kind in ("prompt", "trained"))
    assert prompt > 0 and trained > 0 and "Estimated cost" not in page  # no price table
    assert f"<dd>prompt {prompt:,.0f}, sampled 0, trained {trained:,.0f}</dd>" in page
    assert '<section id="transcripts">' not in page and '<section id="preferences">' not in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page


def test_dpo_report_has_preference_plots_and_the_held_out_examples(dpo_run: Path, tmp_path: Path) -> None:
    page = report(dpo_run, tmp_path)
    data = page_data(page)
    titles = {chart["title"]: chart for chart in data["charts"]}
    assert {"accuracy", "margin", "chosen_reward", "rejected_reward"} <= set(titles)
    assert titles["margin"]["family"] == "Preference"
    assert [s["role"] for s in titles["margin"]["series"]] == ["train", "eval"]
    steps = data["browsers"]["preferences"]  # the DPO evaluation writes preference_examples/
    assert steps and steps[-1]["examples"] and "preference_examples/step_NNNNNN.jsonl" not in page


def test_a_run_without_examples_says_where_they_would_come_from(dpo_run: Path, tmp_path: Path) -> None:
    run = copy_run(dpo_run, tmp_path / "run")
    shutil.rmtree(run / "preference_examples")
    assert "preference_examples/step_NNNNNN.jsonl" in report(run, tmp_path)


def test_dpo_examples_are_shown_when_the_run_has_them(dpo_run: Path, tmp_path: Path) -> None:
    run = copy_run(dpo_run, tmp_path / "run")
    shutil.rmtree(run / "preference_examples")
    (run / "preference_examples").mkdir()
    example = {
        "prompt": "2+2?",
        "chosen": "4, thanks",
        "rejected": "<i>4</i>",
        "chosen_reward": 1.5,
        "rejected_reward": -0.5,
    }
    (run / "preference_examples" / "step_000003.jsonl").write_text(json.dumps(example) + "\n")
    data = page_data(report(run, tmp_path))
    [step] = data["browsers"]["preferences"]
    assert step["step"] == 3 and step["examples"][0]["margin"] == 2.0
    assert step["examples"][0]["rejected"] == "<i>4</i>"


def test_rl_report_has_rewards_and_transcripts(rl_run: Path, tmp_path: Path) -> None:
    page = report(rl_run, tmp_path)
    data = page_data(page)
    reward = next(chart for chart in data["charts"] if chart["title"] == "reward/total")
    assert {"all", "eval all"} <= {s["name"] for s in reward["series"]}
    steps = data["browsers"]["transcripts"]
    assert [step["step"] for step in steps] == [0, 1, 2, 3]
    group = steps[0]["groups"][0]
    assert group["prompt"] and group["trajectories"][0]["turns"][0]["observation"] is None
    assert all(t["total_reward"] is not None for t in group["trajectories"])
    assert '<section id="transcripts">' in page and "Showing 4 of 4 steps" in page


def test_transcript_script_tags_stay_text(hostile_rl_run: Path, tmp_path: Path) -> None:
    page = report(hostile_rl_run, tmp_path)
    assert page.count("<script") == 2, "only the report's own two script elements"
    assert "document.title='pwned'" in page and "<b>bold?</b>" not in page
    actions = [
        turn["action"]
        for group in page_data(page)["browsers"]["transcripts"][-1]["groups"]
        for traj in group["trajectories"]
        for turn in traj["turns"]
    ]
    assert HOSTILE_ACTION in actions


def test_crashed_run_report(crashed_run: Path, tmp_path: Path) -> None:
    page = report(crashed_run, tmp_path, later=3600)
    assert 'class="badge interrupted"' in page and "No end event" in page
    assert "1 in metrics.jsonl" in page
    assert max(max(s["x"]) for chart in page_data(page)["charts"] for s in chart["series"]) == 5


def test_failed_status_is_shown_with_its_error(sl_run: Path, tmp_path: Path) -> None:
    run = copy_run(sl_run, tmp_path / "run")
    failure = {"event": "run.failed", "level": "error", "error": "stage 'train_step' failed: RuntimeError: <oom>"}
    with (run / "events.jsonl").open("a") as handle:
        handle.write(json.dumps(failure) + "\n")
    page = report(run, tmp_path)
    assert "failed at stage train_step" in page and "RuntimeError: &lt;oom&gt;" in page
    assert '<section id="events">' in page


def test_transcript_caps(rl_run: Path) -> None:
    samples = read_transcripts(rl_run, Caps(steps=2, per_step=3, chars=4))
    assert [step["step"] for step in samples.steps] == [0, 3]
    assert sum(len(g["trajectories"]) for g in samples.steps[0]["groups"]) == 3
    assert samples.steps_on_disk == 4 and samples.items_left_out > 0


def test_embedded_json_cannot_close_its_script() -> None:
    text = embed_json({"a": "</script><!-- & -->"})
    assert "<" not in text and ">" not in text and json.loads(text) == {"a": "</script><!-- & -->"}


def test_helpers() -> None:
    assert spread(list(range(10)), 3) == [0, 4, 9]
    assert spread([1, 2], 5) == [1, 2]
    assert clip("abcdef", 3) == "abc… [3 more characters]" and clip(None, 3) == ""


def test_usage_facts_sum_the_steps_and_price_them_when_logged() -> None:
    rows = [
        {"step": 0, "usage/prompt_tokens": 1500.0, "usage/sampled_tokens": 200.0, "usage/trained_tokens": 0.0},
        {"step": 1, "usage/prompt_tokens": 500.0, "usage/sampled_tokens": 0.0, "usage/trained_tokens": 3000.0},
    ]
    assert usage_facts(rows) == [("Tokens", "prompt 2,000, sampled 200, trained 3,000")]
    priced = [{**row, "usage/cost_usd": cost} for row, cost in zip(rows, (0.25, 1.5), strict=True)]
    assert usage_facts(priced)[1] == ("Estimated cost", "$1.75")
    assert usage_facts([{"step": 0, "loss": 1.0}]) == []  # a run from before usage was logged
