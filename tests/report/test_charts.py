"""Which metrics share a chart, which family a chart is in, and how long series are thinned."""

from __future__ import annotations

from typing import Any

from kitchen.apps.report.charts import Chart, build_charts, downsample, family_of


def _charts(rows: list[dict[str, Any]], stages: list[str] | None = None) -> dict[str, Chart]:
    return {chart.title: chart for chart in build_charts(rows, stages or [])}


def test_train_and_eval_share_a_chart_by_name() -> None:
    charts = _charts([{"step": 0, "accuracy": 0.5, "eval/accuracy": 0.4, "eval/num_pairs": 10}, {"step": 1}])
    accuracy = charts["accuracy"]
    assert [(s.name, s.role) for s in accuracy.series] == [("train", "train"), ("eval", "eval")]
    assert accuracy.family == "Preference"
    assert charts["eval/num_pairs"].family == "Evaluation"


def test_eval_nll_joins_the_train_nll_chart() -> None:
    charts = _charts([{"step": 0, "train_mean_nll": 2.0, "eval/nll": 2.5}])
    assert list(charts) == ["train_mean_nll"]
    assert [s.role for s in charts["train_mean_nll"].series] == ["train", "eval"]
    assert charts["train_mean_nll"].family == "Loss & NLL"


def test_env_metrics_get_a_series_per_tag_with_eval_alongside() -> None:
    row = {
        "step": 0,
        "env/all/reward/total": 0.5,
        "env/gsm8k/reward/total": 0.4,
        "eval/all/reward/total": 0.3,
        "env/gsm8k/correct": 0.4,
        "correct": 0.45,
        "eval/all/correct": 0.2,
    }
    charts = _charts([row])
    assert [s.name for s in charts["reward/total"].series] == ["all", "gsm8k", "eval all"]
    assert charts["reward/total"].family == "Reward"
    # An un-prefixed metric next to env/<tag>/M is tag `all`.
    assert [s.name for s in charts["correct"].series] == ["all", "gsm8k", "eval all"]
    assert charts["correct"].family == "Environment"
    assert "eval/all/correct" not in charts


def test_stage_times_stack_and_other_times_get_lines() -> None:
    rows = [{"step": 0, "time/a": 1.0, "time/b": 2.0, "time/step_latency": 3.0}, {"step": 1, "time/a": 1.5}]
    charts = _charts(rows, ["a", "b"])
    stacked = charts["seconds per step by stage"]
    assert stacked.stacked and [s.name for s in stacked.series] == ["a", "b"]
    assert stacked.series[1].y == [2.0, 0.0]
    assert not charts["time/step_latency"].stacked


def test_families() -> None:
    assert family_of("optim/kl_sample_train_v1") == "KL"
    assert family_of("dpo_loss") == "Loss & NLL"
    assert family_of("num_loss_tokens") == "Other"
    assert family_of("optim/learning_rate") == "Optimizer"
    assert family_of("chosen_reward") == "Preference"
    assert family_of("bits_per_byte", eval_only=True) == "Loss & NLL"
    assert family_of("usage/sampled_tokens") == "Usage" and family_of("usage/cost_usd") == "Usage"


def test_every_numeric_key_is_plotted_and_strings_are_not() -> None:
    rows: list[dict[str, Any]] = [{"step": 0, "x": 1.0, "note": "text", "y": "nan"}, {"step": 1, "y": 2.0}]
    charts = _charts(rows)
    assert set(charts) == {"x", "y"}
    assert charts["y"].series[0].x == [1]


def test_downsample_bounds_points_and_keeps_extremes() -> None:
    x = list(range(10_000))
    y = [float(i % 97) for i in x]
    y[4321] = 1e6
    small_x, small_y = downsample(x, y, 1000)
    assert len(small_x) <= 1000 and small_x == sorted(small_x)
    assert 1e6 in small_y and min(small_y) == 0.0
    assert downsample([1, 2], [3.0, 4.0], 1000) == ([1, 2], [3.0, 4.0])


def test_long_run_series_are_capped() -> None:
    rows = [{"step": i, "loss": float(i), "time/a": 0.1} for i in range(5000)]
    for chart in build_charts(rows, ["a"]):
        assert all(len(s.x) <= 1000 for s in chart.series)


def test_evals_during_training_get_their_own_charts_in_the_evaluation_section() -> None:
    """`eval/<task>/<metric>` from a config's `evals:` (kitchen.families.evaluation.during_training),
    beside RL's own."""
    row = {"step": 1, "env/all/reward/total": 0.2, "eval/all/reward/total": 0.1, "eval/arithmetic/accuracy": 0.5}
    row.update({"eval/arithmetic/mean_reward": 0.5, "eval/arithmetic/pass@4": 0.75})
    charts = _charts([{"step": 0, "env/all/reward/total": 0.3}, row])
    for metric in ("accuracy", "mean_reward", "pass@4"):
        chart = charts[f"eval/arithmetic/{metric}"]
        assert chart.family == "Evaluation" and [(s.role, s.x) for s in chart.series] == [("eval", [1])]
    assert [s.name for s in charts["reward/total"].series] == ["all", "eval all"]
