"""Per-step samples for the report: RL transcripts (`rollouts/step_NNNNNN.jsonl`) and DPO held-out
examples (`preference_examples/step_NNNNNN.jsonl`), capped so a long run's report stays small.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kitchen.apps.report.rundata import metric_value, read_jsonl

TRANSCRIPTS_DIR = "rollouts"
# The hook for DPO examples: one object per held-out pair with prompt, chosen, rejected,
# chosen_reward, rejected_reward and optionally margin (else chosen_reward - rejected_reward).
PREFERENCE_EXAMPLES_DIR = "preference_examples"

_STEP_FILE = re.compile(r"^step_(\d+)\.jsonl$")


@dataclass(frozen=True)
class Caps:
    """How much of the per-step samples a report embeds."""

    steps: int = 100
    per_step: int = 16
    chars: int = 2000


@dataclass(frozen=True)
class StepSamples:
    """JSON-ready samples by step, and what the caps left out (the page says so)."""

    steps: list[dict[str, Any]]
    steps_on_disk: int
    items_left_out: int
    bad_lines: int


def step_files(folder: Path) -> list[tuple[int, Path]]:
    """`step_NNNNNN.jsonl` files of a folder, by step."""
    if not folder.is_dir():
        return []
    found = [(int(m[1]), p) for p in folder.iterdir() if (m := _STEP_FILE.match(p.name)) and p.is_file()]
    return sorted(found)


def spread(items: list[Any], limit: int) -> list[Any]:
    """At most `limit` items evenly spaced over the list, always keeping the first and last."""
    if len(items) <= limit:
        return list(items)
    if limit == 1:
        return [items[-1]]
    indices = sorted({round(i * (len(items) - 1) / (limit - 1)) for i in range(limit)})
    return [items[i] for i in indices]


def clip(text: Any, limit: int) -> str:
    text = "" if text is None else str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


def _turn(raw: Any, caps: Caps) -> dict[str, Any]:
    turn: dict[str, Any] = raw if isinstance(raw, dict) else {}
    metrics = turn.get("metrics")
    metrics = metrics if isinstance(metrics, dict) else {}
    calls = turn.get("tool_calls")
    calls = calls if isinstance(calls, list) else []
    env_text = turn.get("env_text")
    return {
        "observation": clip(turn.get("observation"), caps.chars),
        "env_text": None if env_text is None else clip(env_text, caps.chars),
        "action": clip(turn.get("action"), caps.chars),
        "tool_calls": [_tool_call(call, caps) for call in calls if isinstance(call, dict)],
        "stop_reason": None if turn.get("stop_reason") is None else str(turn.get("stop_reason")),
        "reward": metric_value(turn.get("reward")),
        "metrics": {str(k): v for k, v in metrics.items() if metric_value(v) is not None},
    }


def _tool_call(call: dict[str, Any], caps: Caps) -> dict[str, str]:
    """A tool call as the page shows it: its name and its arguments as JSON text."""
    arguments = json.dumps(call.get("arguments"), ensure_ascii=False, default=str)
    return {"name": clip(call.get("name"), 200), "arguments": clip(arguments, caps.chars)}


def _group(records: list[dict[str, Any]], caps: Caps) -> dict[str, Any]:
    """A group's trajectories; a prompt every trajectory starts from is shown once, on the group."""
    trajectories: list[dict[str, Any]] = []
    for record in records:
        turns = record.get("turns")
        turns = turns if isinstance(turns, list) else []
        advantage = record.get("advantage", record.get("advantages"))
        trajectories.append(
            {
                "trajectory": record.get("trajectory"),
                "total_reward": metric_value(record.get("total_reward")),
                "advantage": metric_value(advantage),
                "turns": [_turn(turn, caps) for turn in turns],
            }
        )
    firsts = {traj["turns"][0]["observation"] if traj["turns"] else None for traj in trajectories}
    prompt = firsts.pop() if len(firsts) == 1 and len(trajectories) > 1 else None
    if prompt:
        for traj in trajectories:
            traj["turns"][0]["observation"] = None
    first = records[0]
    tags = first.get("tags")
    tags = tags if isinstance(tags, list) else []
    return {
        "group": first.get("group"),
        "tags": [str(tag) for tag in tags],
        "sampler_step": first.get("sampler_step"),
        "prompt": prompt,
        "trajectories": trajectories,
    }


def _read_steps(folder: Path, caps: Caps, describe: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> StepSamples:
    """A step-per-file folder, spread over at most `caps.steps` steps and `caps.per_step` records
    each; `describe` turns a step's kept records into what the page shows for it."""
    files = step_files(folder)
    steps, left_out, bad = [], 0, 0
    for step, path in spread(files, caps.steps):
        raw = read_jsonl(path)
        bad += raw.bad_lines
        kept = raw.records[: caps.per_step]
        left_out += len(raw.records) - len(kept)
        steps.append({"step": step, **describe(kept)})
    return StepSamples(steps, len(files), left_out, bad)


def read_transcripts(run_path: Path, caps: Caps) -> StepSamples:
    """RL transcripts by step, grouped as sampled (see `group_transcripts` in kitchen/families/rl/step.py)."""

    def describe(kept: list[dict[str, Any]]) -> dict[str, Any]:
        groups: dict[Any, list[dict[str, Any]]] = {}
        for record in kept:
            groups.setdefault(record.get("group"), []).append(record)
        return {"groups": [_group(records, caps) for records in groups.values()]}

    return _read_steps(run_path / TRANSCRIPTS_DIR, caps, describe)


def _example(record: dict[str, Any], caps: Caps) -> dict[str, Any]:
    chosen, rejected = metric_value(record.get("chosen_reward")), metric_value(record.get("rejected_reward"))
    margin = metric_value(record.get("margin"))
    if margin is None and chosen is not None and rejected is not None:
        margin = chosen - rejected
    return {
        "prompt": clip(record.get("prompt"), caps.chars),
        "chosen": clip(record.get("chosen"), caps.chars),
        "rejected": clip(record.get("rejected"), caps.chars),
        "chosen_reward": chosen,
        "rejected_reward": rejected,
        "margin": margin,
    }


def read_preference_examples(run_path: Path, caps: Caps) -> StepSamples:
    """DPO held-out pairs with their implicit rewards, by step, if the run wrote any."""
    return _read_steps(
        run_path / PREFERENCE_EXAMPLES_DIR, caps, lambda kept: {"examples": [_example(r, caps) for r in kept]}
    )
