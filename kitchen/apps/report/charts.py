"""Which plots a run gets: metric keys grouped into charts and families, series downsampled.

Train and eval share a chart where their names match (`X` and `eval/X`; RL's `env/<tag>/M` and
`eval/<tag>/M`, one series per tag); `time/<stage>` keys form one stacked chart per run. The
metrics of a config's `evals:` (`eval/<task>/accuracy`, `.../pass@4`, ...) get a chart each in the
Evaluation section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from kitchen.apps.report.rundata import metric_value

Role = Literal["train", "eval"]

FAMILIES = (
    *("Loss & NLL", "Reward", "Preference", "Environment", "KL", "Evaluation", "Optimizer", "Usage", "Time"),
    "Other",
)

MAX_POINTS = 1000

# Eval keys whose train counterpart has another name.
_TRAIN_ALIASES = {"nll": "train_mean_nll"}
_PREFERENCE = ("accuracy", "margin", "chosen_reward", "rejected_reward")
_OPTIMIZER = ("learning_rate", "grad_norm", "entropy")
_TASK_METRIC = re.compile(r"^eval/[^/]+/(accuracy|mean_reward|nll|margin|pass@\d+|maj@\d+)$")
"""An eval task's metric as evaluation during training logs it (`kitchen.families.evaluation.during_training`)."""


@dataclass(frozen=True)
class Series:
    name: str
    role: Role
    x: list[int]
    y: list[float]


@dataclass
class Chart:
    title: str
    family: str
    series: list[Series] = field(default_factory=list)
    stacked: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "family": self.family,
            "stacked": self.stacked,
            "series": [{"name": s.name, "role": s.role, "x": s.x, "y": s.y} for s in self.series],
        }


def family_of(name: str, eval_only: bool = False) -> str:
    """The section a metric is plotted in, from its name (without `eval/` or `env/<tag>/`)."""
    lowered = name.lower()
    if lowered.startswith("num_"):
        return "Evaluation" if eval_only else "Other"
    if lowered.startswith("time/"):
        return "Time"
    if lowered.startswith("usage/"):
        return "Usage"
    if "kl" in lowered.replace("/", "_").split("_") or lowered.startswith("kl"):
        return "KL"
    if any(part in lowered for part in _PREFERENCE):
        return "Preference"
    if "nll" in lowered or "loss" in lowered or "bits_per_byte" in lowered:
        return "Loss & NLL"
    if "reward" in lowered:
        return "Reward"
    if lowered.startswith("optim/") or any(part in lowered for part in _OPTIMIZER):
        return "Optimizer"
    return "Evaluation" if eval_only else "Other"


def downsample(x: list[int], y: list[float], limit: int = MAX_POINTS) -> tuple[list[int], list[float]]:
    """At most `limit` points: each bucket keeps its lowest and highest point, so spikes survive."""
    if len(x) <= limit:
        return x, y
    buckets = max(1, limit // 2)
    size = len(x) / buckets
    keep: list[int] = []
    for b in range(buckets):
        lo, hi = int(b * size), min(len(x), int((b + 1) * size))
        if lo >= hi:
            continue
        window = range(lo, hi)
        keep.extend(sorted({min(window, key=y.__getitem__), max(window, key=y.__getitem__)}))
    return [x[i] for i in keep], [y[i] for i in keep]


def _mean_buckets(x: list[int], ys: list[list[float]], limit: int) -> tuple[list[int], list[list[float]]]:
    """Aligned series (a stacked chart) averaged over buckets of steps, keeping them aligned."""
    if len(x) <= limit:
        return x, ys
    size = len(x) / limit
    bounds = [(int(b * size), min(len(x), int((b + 1) * size))) for b in range(limit)]
    bounds = [(lo, hi) for lo, hi in bounds if lo < hi]
    new_x = [x[lo] for lo, _ in bounds]
    return new_x, [[sum(y[lo:hi]) / (hi - lo) for lo, hi in bounds] for y in ys]


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def _series(rows: list[dict[str, Any]], key: str, name: str, role: Role, limit: int) -> Series:
    points = [(int(row["step"]), v) for row in rows if (v := metric_value(row.get(key))) is not None]
    x, y = downsample([p[0] for p in points], [p[1] for p in points], limit)
    return Series(name, role, x, [_round(v) for v in y])


def _numeric_keys(rows: list[dict[str, Any]]) -> list[str]:
    keys: dict[str, None] = {}
    for row in rows:
        for key, value in row.items():
            if key != "step" and metric_value(value) is not None:
                keys[key] = None
    return sorted(keys)


def _env_parts(key: str) -> tuple[str, str] | None:
    """`env/<tag>/<metric>` -> (tag, metric)."""
    parts = key.split("/", 2)
    return (parts[1], parts[2]) if len(parts) == 3 and parts[0] == "env" else None


def _time_chart(rows: list[dict[str, Any]], keys: list[str], stages: list[str], limit: int) -> Chart | None:
    """Seconds per step in each stage, stacked (stage order), missing values as zero."""
    stacked = [f"time/{s}" for s in stages if f"time/{s}" in keys] if stages else keys
    if not stacked:
        return None
    x = [int(row["step"]) for row in rows]
    ys = [[metric_value(row.get(key)) or 0.0 for row in rows] for key in stacked]
    x, ys = _mean_buckets(x, ys, limit)
    series = [
        Series(key[len("time/") :], "train", x, [_round(v) for v in y]) for key, y in zip(stacked, ys, strict=True)
    ]
    return Chart("seconds per step by stage", "Time", series, stacked=True)


def _env_chart(charts: dict[str, Chart], metric: str) -> Chart:
    """The chart of one environment metric, a series per tag (`all` and each env's)."""
    family = "Reward" if "reward" in metric else "Environment"
    return charts.setdefault(f"env:{metric}", Chart(metric, family))


def build_charts(rows: list[dict[str, Any]], stages: list[str], limit: int = MAX_POINTS) -> list[Chart]:
    """Every numeric metric on some chart, charts ordered by family then title."""
    keys = _numeric_keys(rows)
    key_set = set(keys)
    # RL logs some `all` metrics without a prefix: `M` next to `env/<tag>/M` is tag `all`'s series.
    env_metrics = {parts[1] for key in keys if (parts := _env_parts(key))}
    charts: dict[str, Chart] = {}
    time_keys = [k for k in keys if k.startswith("time/")]
    stage_times = [f"time/{s}" for s in stages]
    time_chart = _time_chart(rows, time_keys, stages, limit)
    if time_chart is not None:
        charts["time/"] = time_chart
    for key in keys:
        if key.startswith("time/"):
            if stages and key not in stage_times:
                charts[key] = Chart(key, "Time", [_series(rows, key, key, "train", limit)])
            continue
        env = _env_parts(key)
        if env is not None:
            _env_chart(charts, env[1]).series.append(_series(rows, key, env[0], "train", limit))
            continue
        if _TASK_METRIC.match(key):
            charts[key] = Chart(key, "Evaluation", [_series(rows, key, "eval", "eval", limit)])
            continue
        if key.startswith("eval/"):
            base = key[len("eval/") :]
            env = _env_parts(f"env/{base}")
            if env is not None and env[1] in env_metrics:
                _env_chart(charts, env[1]).series.append(_series(rows, key, f"eval {env[0]}", "eval", limit))
                continue
            train_key = base if base in key_set else _TRAIN_ALIASES.get(base)
            if train_key in key_set and train_key is not None:
                chart = charts.setdefault(train_key, Chart(train_key, family_of(train_key)))
                chart.series.append(_series(rows, key, "eval", "eval", limit))
                continue
            charts[key] = Chart(key, family_of(base, eval_only=True), [_series(rows, key, "eval", "eval", limit)])
            continue
        if key in env_metrics and f"env/all/{key}" not in key_set:
            _env_chart(charts, key).series.insert(0, _series(rows, key, "all", "train", limit))
            continue
        chart = charts.setdefault(key, Chart(key, family_of(key)))
        chart.series.insert(0, _series(rows, key, "train", "train", limit))
    return sorted(charts.values(), key=_order)


def _order(chart: Chart) -> tuple[int, bool, str]:
    return FAMILIES.index(chart.family), not chart.title.endswith("reward/total"), chart.title
