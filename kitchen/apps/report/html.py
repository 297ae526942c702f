"""The report page: static HTML for the run's facts, embedded JSON and inline JS for plots and
sample browsers, so one file opens anywhere without a network.

Every run-provided string reaches the page either through `html.escape` or as JSON that the
script inserts with `textContent`; the JSON block escapes `<`, `>` and `&` so no text can close it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape
from importlib import resources
from typing import Any

from kitchen.apps.report.charts import FAMILIES, Chart
from kitchen.apps.report.rundata import RunData, metric_value
from kitchen.apps.report.samples import PREFERENCE_EXAMPLES_DIR, TRANSCRIPTS_DIR, Caps, StepSamples


def _asset(name: str) -> str:
    return resources.files("kitchen.apps.report").joinpath("static", name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """JSON safe inside a <script> element: no `</script>` or `<!--` can appear in it."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _when(stamp: datetime | float | None) -> str:
    if stamp is None:
        return "unknown"
    moment = stamp if isinstance(stamp, datetime) else datetime.fromtimestamp(stamp).astimezone()
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def flatten(config: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """Dotted keys and display values of a nested config, in file order."""
    items: list[tuple[str, str]] = []
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            items.extend(flatten(value, f"{name}."))
        else:
            items.append((name, json.dumps(value) if not isinstance(value, str) else value))
    return items


def _status_note(run: RunData, now: float) -> str:
    status = run.status
    if status.state == "failed":
        where = f"Stage <code>{escape(status.failed_stage)}</code> failed" if status.failed_stage else "The run failed"
        return f'<div class="note bad"><strong>{where}:</strong><pre>{escape(status.error or "")}</pre></div>'
    if status.state == "interrupted":
        return (
            '<div class="note warn">No end event: the run was interrupted (killed, crashed or Ctrl-C). '
            f"Its files last changed at {escape(_when(run.last_write))}; a rerun with the same "
            "<code>log_path</code> resumes from the last checkpoint.</div>"
        )
    if status.state == "running":
        ago = format_duration(now - run.last_write) if run.last_write else "unknown"
        return (
            f'<div class="note info">No end event yet and the files changed {escape(ago)} ago: the run looks '
            "alive. Run <code>kitchen report</code> again to refresh this page.</div>"
        )
    return ""


def usage_facts(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The run's token usage and estimated cost, summed over its steps' rows (none before usage
    was logged)."""

    def total(key: str) -> float | None:
        values = [v for row in rows if (v := metric_value(row.get(key))) is not None]
        return sum(values) if values else None

    counts = [(kind, total(f"usage/{kind}_tokens")) for kind in ("prompt", "sampled", "trained")]
    if all(count is None for _, count in counts):
        return []
    facts = [("Tokens", ", ".join(f"{kind} {count or 0:,.0f}" for kind, count in counts))]
    cost = total("usage/cost_usd")
    if cost is not None:
        facts.append(("Estimated cost", f"${cost:,.2f}"))
    return facts


def _summary(run: RunData, now: float) -> str:
    last = run.checkpoints[-1] if run.checkpoints else None
    attempts = f" (attempt {run.timing.attempts})" if run.timing.attempts > 1 else ""
    facts = [
        ("Recipe", run.recipe or "unknown"),
        ("Status", run.status.label),
        ("Steps done", str(run.steps_done)),
        ("Backend", str(run.config.get("backend", "unknown"))),
        ("Model", str(run.config.get("model_name", "unknown"))),
        ("Wall time", format_duration(run.timing.wall_seconds) + attempts),
        ("Started", _when(run.timing.started)),
        ("Last checkpoint", f"{last.name} (step {last.step})" if last else "none"),
    ]
    facts += usage_facts(run.rows)
    cells = "".join(f"<div><dt>{escape(k)}</dt><dd>{escape(v)}</dd></div>" for k, v in facts)
    notes = _status_note(run, now)
    if run.bad_lines:
        skipped = ", ".join(f"{count} in {name}" for name, count in run.bad_lines.items())
        notes += f'<div class="note warn">Skipped unreadable lines (torn or corrupt): {escape(skipped)}.</div>'
    return f'<section id="summary"><dl class="facts">{cells}</dl>{notes}</section>'


def _charts(charts: list[Chart]) -> str:
    if not charts:
        return '<section id="metrics"><h2>Metrics</h2><p class="muted">No metrics were logged yet.</p></section>'
    parts = ['<section id="metrics"><h2>Metrics</h2>']
    parts.append(
        '<p class="muted">Train series are solid, eval series dashed; hover a plot for values. Series with more '
        "than 1000 points keep each bucket's lowest and highest value.</p>"
    )
    for family in FAMILIES:
        indices = [i for i, chart in enumerate(charts) if chart.family == family]
        if not indices:
            continue
        parts.append(f'<h3>{escape(family)}</h3><div class="grid">')
        for i in indices:
            parts.append(
                f'<figure class="card chart" data-chart="{i}"><figcaption>{escape(charts[i].title)}</figcaption>'
                '<div class="plot"></div><div class="legend"></div></figure>'
            )
        parts.append("</div>")
    parts.append("</section>")
    return "".join(parts)


def _checkpoints(run: RunData) -> str:
    if not run.checkpoints:
        return '<section id="checkpoints"><h2>Checkpoints</h2><p class="muted">No checkpoint saved yet.</p></section>'
    rows = "".join(
        "<tr>"
        f'<td>{escape(r.name)}</td><td class="num">{r.step}</td>'
        f"<td>{escape(', '.join(f'{k}={v}' for k, v in r.loops.items()) or '-')}</td>"
        f"<td>{escape(', '.join(r.state) or '-')}</td>"
        f'<td class="path">{escape(r.state_path or "-")}</td><td class="path">{escape(r.sampler_path or "-")}</td>'
        "</tr>"
        for r in run.checkpoints
    )
    head = "<tr><th>name</th><th>step</th><th>loops</th><th>state keys</th><th>weights</th><th>sampler</th></tr>"
    return f'<section id="checkpoints"><h2>Checkpoints</h2><table>{head}{rows}</table></section>'


def _browser(kind: str, title: str, note: str, samples: StepSamples) -> str:
    controls = (
        '<div class="controls"><button type="button" data-move="-1" aria-label="previous step">&#8249;</button>'
        '<input type="range" min="0" value="0" aria-label="step"><select aria-label="step"></select>'
        '<button type="button" data-move="1" aria-label="next step">&#8250;</button></div>'
    )
    body = controls + '<div class="browser-body"></div>' if samples.steps else ""
    return (
        f'<section id="{kind}"><h2>{escape(title)}</h2><p class="muted">{note}</p>'
        f'<div class="browser" data-browser="{kind}">{body}</div></section>'
    )


def _caps_note(samples: StepSamples, caps: Caps, unit: str) -> str:
    parts = [f"{len(samples.steps)} of {samples.steps_on_disk} steps on disk"]
    if len(samples.steps) < samples.steps_on_disk:
        parts[0] += " (evenly spaced, first and last kept)"
    parts.append(f"at most {caps.per_step} {unit} per step")
    if samples.items_left_out:
        parts.append(f"{samples.items_left_out} {unit} left out by that cap")
    parts.append(f"texts clipped at {caps.chars} characters")
    if samples.bad_lines:
        parts.append(f"{samples.bad_lines} unreadable lines skipped")
    return escape("Showing " + "; ".join(parts) + ".")


def _transcripts(samples: StepSamples, caps: Caps) -> str:
    note = _caps_note(samples, caps, "trajectories")
    note += escape(
        f" Each step's file in {TRANSCRIPTS_DIR}/ holds the first transcript_groups groups sampled for it; "
        "a prompt shared by a whole group is shown once above it."
    )
    return _browser("transcripts", "Rollout transcripts", note, samples)


def _preferences(samples: StepSamples, caps: Caps) -> str:
    if samples.steps:
        return _browser("preferences", "Held-out examples", _caps_note(samples, caps, "pairs"), samples)
    note = escape(
        "This run directory holds no per-example held-out comparisons, so only the held-out aggregates are "
        "shown (eval/accuracy, eval/margin, eval/chosen_reward, eval/rejected_reward in the plots above). "
        f"Examples appear here when the evaluation writes {PREFERENCE_EXAMPLES_DIR}/step_NNNNNN.jsonl with one "
        "object per pair: prompt, chosen, rejected, chosen_reward, rejected_reward (margin optional)."
    )
    return f'<section id="preferences"><h2>Held-out examples</h2><p class="muted">{note}</p></section>'


def _events(run: RunData) -> str:
    events = run.notable_events()
    if not events:
        return ""
    skip = {"event", "level", "timestamp", "recipe"}
    rows = "".join(
        f'<tr class="{escape(str(e.get("level")))}"><td>{escape(str(e.get("timestamp", "")))}</td>'
        f"<td>{escape(str(e.get('level')))}</td><td>{escape(str(e.get('event')))}</td>"
        f"<td>{escape(' '.join(f'{k}={v}' for k, v in e.items() if k not in skip))}</td></tr>"
        for e in events
    )
    head = "<tr><th>time</th><th>level</th><th>event</th><th>fields</th></tr>"
    return f'<section id="events"><h2>Warnings and errors</h2><table>{head}{rows}</table></section>'


def _config(run: RunData) -> str:
    if not run.config:
        why = f" ({escape(run.config_problem)})" if run.config_problem else ""
        return f'<section id="config"><h2>Config</h2><p class="muted">No readable config.yaml{why}.</p></section>'
    rows = "".join(
        f'<tr><td class="key">{escape(k)}</td><td class="path">{escape(v)}</td></tr>' for k, v in flatten(run.config)
    )
    return f'<section id="config"><h2>Config</h2><table class="config">{rows}</table></section>'


def _stat(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, int | float) else "-"


def _evals(evals: Sequence[Mapping[str, Any]]) -> str:
    """`kitchen eval` results of this run's checkpoints: one table per evaluation, newest first."""
    blocks = []
    for document in reversed(evals):
        facts = " · ".join(
            escape(str(part))
            for part in (document.get("created"), f"checkpoint {document.get('checkpoint')}", document.get("model"))
            if part
        )
        rows = "".join(
            f"<tr><td>{escape(str(row.get('task')))}</td><td>{escape(str(row.get('metric')))}</td>"
            f'<td class="num">{_stat(row.get("value"))}</td><td class="num">± {_stat(row.get("stderr"))}</td>'
            f'<td class="num">{escape(str(row.get("n")))}</td><td class="num">{escape(str(row.get("seed")))}</td></tr>'
            for row in document["results"]
            if isinstance(row, dict)
        )
        head = "<tr><th>task</th><th>metric</th><th>value</th><th>stderr</th><th>n</th><th>seed</th></tr>"
        title = f'<h3>{escape(str(document.get("dir")))}</h3><p class="muted">{facts}</p>'
        blocks.append(f'{title}<table class="evals">{head}{rows}</table>')
    note = (
        '<p class="muted">From <code>kitchen eval</code>: <code>evals/*/results.json</code>, '
        "per-sample grades beside it.</p>"
    )
    return f'<section id="evals"><h2>Evaluations</h2>{note}{"".join(blocks)}</section>'


def is_preference_run(run: RunData, preferences: StepSamples) -> bool:
    return bool(preferences.steps) or run.recipe == "dpo" or any("eval/margin" in row for row in run.rows)


def render_report(
    run: RunData,
    charts: list[Chart],
    transcripts: StepSamples,
    preferences: StepSamples,
    caps: Caps,
    now: float,
    evals: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The whole page as one string."""
    sections = [_summary(run, now), _charts(charts), _checkpoints(run)]
    if evals:
        sections.append(_evals(evals))
    if transcripts.steps_on_disk:
        sections.append(_transcripts(transcripts, caps))
    if is_preference_run(run, preferences):
        sections.append(_preferences(preferences, caps))
    sections += [_events(run), _config(run)]
    links = [
        (anchor, label)
        for anchor, label in [
            ("summary", "Summary"),
            ("metrics", "Metrics"),
            ("checkpoints", "Checkpoints"),
            ("evals", "Evaluations"),
            ("transcripts", "Transcripts"),
            ("preferences", "Held-out examples"),
            ("events", "Warnings"),
            ("config", "Config"),
        ]
        if any(f'<section id="{anchor}"' in section for section in sections)
    ]
    nav = "".join(f'<a href="#{a}">{escape(label)}</a>' for a, label in links)
    data = {
        "charts": [chart.to_json() for chart in charts],
        "browsers": {"transcripts": transcripts.steps, "preferences": preferences.steps},
    }
    title = f"{run.path.name} · {run.recipe or 'run'} · {run.status.label}"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">'
        f"<title>{escape(title)}</title><style>{_asset('report.css')}</style></head><body>"
        f'<header><div><h1>{escape(run.path.name)}</h1><p class="path">{escape(str(run.path.resolve()))}</p></div>'
        f'<span class="badge {escape(run.status.state)}">{escape(run.status.label)}</span></header>'
        f"<nav>{nav}</nav><main>{''.join(sections)}</main>"
        f"<footer>kitchen report · generated {escape(_when(now))}</footer>"
        f'<script type="application/json" id="report-data">{embed_json(data)}</script>'
        f"<script>{_asset('report.js')}</script></body></html>\n"
    )
