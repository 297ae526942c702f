"""`kitchen eval TARGET --tasks T1,T2 ...`: resolve the target, build each task's settings, run the
tasks one after another on one opened model, write the results and print the summary table.

A task is named as registered (`arithmetic`), with its data file (`nll:data.jsonl`, which sets the
task's `dataset`), or as a JSONL file of prompts (`my.jsonl`, graded by `--grader`). Task settings
are set with `TASK.key=value` (or `key=value` for every task that has the key).

Each generative task's graded samples are appended to `OUT/samples/<task>.jsonl` as they come in,
and `OUT/plan.json` records what was asked; `--resume` continues an interrupted evaluation in its
`--out` folder with the same plan, sampling only the items not yet graded there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from kitchen.engine.config.loading import load_config, parse_override
from kitchen.engine.errors import ConfigError
from kitchen.engine.eval_tasks import EvalModel, EvalSettings, EvalTask, eval_tasks, get_task
from kitchen.families.evaluation.generation import JOURNAL, Journal
from kitchen.families.evaluation.results import (
    RESULTS_FILE,
    SAMPLES_DIR,
    TaskOutcome,
    default_out_dir,
    format_table,
    result_rows,
    samples_file,
    write_results,
)

SHARED_FLAGS = ("limit", "samples", "seed", "temperature", "max_tokens", "thinking_budget")
HARNESS_IGNORES = ("grader", "samples", "temperature", "max_tokens", "thinking_budget")
RUN_SAMPLING_KEYS = ("temperature", "max_tokens")
"""Settings a run's config supplies when the command line does not: evaluate as it sampled."""
PLAN_FILE = "plan.json"
"""What an evaluation was asked to do (target and each task's settings): `--resume` must match it."""


@dataclass(frozen=True)
class TaskRequest:
    label: str
    task: EvalTask
    settings: EvalSettings


def _split_spec(spec: str, names: Mapping[str, EvalTask]) -> tuple[str, str | None]:
    """(task name, its data file or None) of one `--tasks` entry."""
    name, colon, data = spec.partition(":")
    if colon and name in names:
        return name, data
    if spec.endswith(".jsonl"):
        return "jsonl", spec
    return spec, None


def plan_tasks(
    specs: Sequence[str], shared: Mapping[str, Any], grader: str | None, overrides: Sequence[str]
) -> list[TaskRequest]:
    """Each task with its validated settings; a bad name, key or value is a ConfigError naming
    the task."""
    names = eval_tasks()
    parsed = [(spec, *_split_spec(spec, names)) for spec in specs]
    tasks = [(spec, get_task(name), data) for spec, name, data in parsed]
    scoped: dict[str, list[str]] = {spec: [] for spec in specs}
    for text in overrides:
        path, _ = parse_override(text)
        owners = [spec for spec, name, _ in parsed if path[0] in (name, spec) and len(path) > 1]
        if owners:
            for spec in owners:
                scoped[spec].append(text.split(".", 1)[1])
            continue
        having = [spec for spec, task, _ in tasks if path[0] in task.settings.model_fields]
        for spec in having or [specs[0]]:
            scoped[spec].append(text)
    requests = []
    for spec, task, data in tasks:
        base: dict[str, Any] = {key: value for key, value in shared.items() if value is not None}
        fields = task.settings.model_fields
        if data is not None:
            if "dataset" not in fields:
                raise ConfigError(f"task {spec!r}: task {task.name!r} takes no data file")
            base["dataset"] = data
        if grader is not None and "grader" in fields:
            base["grader"] = grader
        elif (
            "grader" in fields
            and fields["grader"].is_required()
            and not any(o.startswith("grader=") for o in scoped[spec])
        ):
            raise ConfigError(
                f"task {spec!r} needs a grader: --grader math|exact|module:function (a function of "
                "(prompt, response, record) returning a bool, a number or a dict)"
            )
        try:
            settings = load_config(task.settings, None, scoped[spec], base=base)
        except ConfigError as exc:
            raise ConfigError(f"task {spec!r}: {exc}") from None
        requests.append(TaskRequest(spec, task, settings))
    return requests


async def run_tasks(
    model: EvalModel, requests: Sequence[TaskRequest], out_dir: Path | None = None
) -> list[TaskOutcome]:
    """Each task in turn on one model; with `out_dir`, each task's graded samples journalled to
    its samples file there (what an earlier run of the same plan left is reused)."""
    outcomes = []
    for request in requests:
        token = None
        if out_dir is not None:
            (out_dir / SAMPLES_DIR).mkdir(parents=True, exist_ok=True)
            token = JOURNAL.set(Journal.open(out_dir / SAMPLES_DIR / samples_file(request.label), request.label))
        try:
            result = await request.task.evaluate(model, request.settings)
        finally:
            if token is not None:
                JOURNAL.reset(token)
        outcomes.append(TaskOutcome(request.label, request.settings.model_dump(mode="json"), result))
    return outcomes


def start_plan(out_dir: Path, plan: Mapping[str, Any], resume: bool) -> None:
    """Write the plan to a new (or empty) `out_dir`, or with `resume` check that the interrupted
    evaluation there had the same one."""
    path = out_dir / PLAN_FILE
    if not resume:
        out_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(plan, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return
    if (out_dir / RESULTS_FILE).is_file():
        raise ConfigError(f"--resume: {out_dir} holds a finished evaluation ({RESULTS_FILE})")
    try:
        earlier = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--resume: {path} is not an evaluation's plan ({exc})") from None
    if earlier != json.loads(json.dumps(plan)):
        changed = _first_difference(earlier, plan)
        raise ConfigError(f"--resume: {out_dir} was started with other settings ({changed}); resume with the same ones")


def _first_difference(earlier: Any, now: Any, where: str = "") -> str:
    if isinstance(earlier, Mapping) and isinstance(now, Mapping):
        for key in sorted({*earlier, *now}):
            if earlier.get(key) != now.get(key):
                return _first_difference(earlier.get(key), now.get(key), f"{where}.{key}" if where else str(key))
    return f"{where or 'plan'}: was {earlier!r}, now {now!r}"


def run_command(args: argparse.Namespace) -> None:
    from kitchen.families.evaluation.target import describe, open_model, resolve_target

    if args.resume and args.out is None:
        raise ConfigError("--resume needs --out: the folder of the interrupted evaluation")
    if args.resume and args.harness is not None:
        raise ConfigError(f"--resume does not apply to --harness {args.harness}")
    if not args.resume and args.out is not None and args.out.exists() and any(args.out.iterdir()):
        raise ConfigError(f"--out {args.out} exists and is not empty (--resume continues an interrupted evaluation)")
    specs = [spec.strip() for spec in args.tasks.split(",") if spec.strip()]
    if not specs:
        raise ConfigError("--tasks names no task")
    if args.harness is not None:
        given = [f"--{flag.replace('_', '-')}" for flag in HARNESS_IGNORES if getattr(args, flag) is not None]
        if given:
            raise ConfigError(f"{given[0]} does not apply to --harness {args.harness}: its tasks say how to sample")
    target = resolve_target(args.target, args.run, args.checkpoint, args.renderer, args.backend, args.base)
    shared = {flag: getattr(args, flag) for flag in SHARED_FLAGS}
    for key in RUN_SAMPLING_KEYS:  # sample as the run did, unless told otherwise
        saved = target.saved(f"sampling.{key}", key)
        if shared[key] is None and isinstance(saved, int | float):
            shared[key] = saved
    if args.harness == "lm-eval":
        from kitchen.apps.eval.harness import run_lm_eval

        rows, out_dir = run_lm_eval(target, specs, shared, args.overrides, args.out)
        print(format_table(rows))
        print(f"results written: {out_dir}")
        return
    requests = plan_tasks(specs, shared, args.grader, args.overrides)
    started = time.time()
    out_dir = args.out or default_out_dir(target.run_dir, target.config.model_name, started)
    plan = {"model": describe(target), "tasks": {r.label: r.settings.model_dump(mode="json") for r in requests}}
    start_plan(out_dir, plan, args.resume)

    async def go() -> list[TaskOutcome]:
        async with open_model(target) as model:
            return await run_tasks(model, requests, out_dir)

    outcomes = asyncio.run(go())
    seed = requests[0].settings.seed
    header = {
        "model": describe(target),
        "target": args.target,
        "checkpoint": target.record.name if target.record is not None else None,
        "seed": seed,
        "created": datetime.fromtimestamp(started).astimezone().isoformat(timespec="seconds"),
        "seconds": round(time.time() - started, 3),
        "config": {
            "backend": target.config.backend,
            "model_name": target.config.model_name,
            "renderer": target.renderer,
        },
    }
    write_results(out_dir, outcomes, header)
    print(format_table(result_rows(outcomes, describe(target), seed)))
    print(f"results written: {out_dir}")
