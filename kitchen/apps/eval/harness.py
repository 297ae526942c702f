"""`kitchen eval TARGET --harness lm-eval --tasks ...`: lm-evaluation-harness tasks (by name, or a
task YAML, e.g. one over a local JSONL) run on the target through `KitchenLM`, with kitchen's
results files and table. Harness settings are `key=value`: `num_fewshot`, `chat_template` (render
prompts with the target's renderer), `max_length`, `system_instruction`.
"""

from __future__ import annotations

import asyncio
import difflib
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from kitchen.engine.config.loading import load_config
from kitchen.engine.config.yaml_bounded import load_yaml
from kitchen.engine.errors import ConfigError
from kitchen.engine.eval_tasks import SampleRecord, TaskResult
from kitchen.engine.runs.targets import CheckpointTarget
from kitchen.families.evaluation.results import TaskOutcome, default_out_dir, result_rows, write_results
from train_core.eval_stats import Estimate

INSTALL_HINT = (
    "the lm-eval harness needs the 'lm-eval' extra: bash scripts/setup_lm_eval.sh (pip install 'kitchen[lm-eval]')"
)


class HarnessSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit: int | None = Field(None, ge=1, description="documents per task (default: all)")
    seed: int = Field(0, description="the harness's random, numpy, torch and few-shot seeds, and sampling seeds")
    num_fewshot: int | None = Field(None, ge=0, description="few-shot examples (default: the task's)")
    chat_template: bool = Field(False, description="render prompts as chat with the target's renderer")
    system_instruction: str | None = Field(None, description="a system message before each prompt")
    max_length: int = Field(2048, ge=2, description="context tokens the model sees (rolling windows' length)")
    bootstrap_iters: int = Field(1000, ge=0, description="resamples behind the harness's standard errors")


def _task_names(specs: Sequence[str]) -> tuple[list[str], list[str]]:
    """(task names, folders to include) for names and task YAML files."""
    names, folders = [], []
    for spec in specs:
        path = Path(spec)
        if path.suffix in (".yaml", ".yml"):
            if not path.is_file():
                raise ConfigError(f"task YAML not found: {spec}")
            try:
                document = load_yaml(path.read_text(encoding="utf-8")) or {}
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                raise ConfigError(f"task YAML {spec}: cannot read it ({exc})") from None
            if not isinstance(document, dict) or not isinstance(document.get("task"), str):
                raise ConfigError(f"{spec}: a task YAML needs a 'task' name")
            names.append(document["task"])
            folders.append(str(path.resolve().parent))
        else:
            names.append(spec)
    return names, sorted(set(folders))


def _metric_rows(results: Mapping[str, Any], task: str) -> dict[str, Estimate]:
    metrics = results["results"][task]
    n = int(results.get("n-samples", {}).get(task, {}).get("effective", 0))
    out = {}
    for key, value in metrics.items():
        metric, _, filtering = key.partition(",")
        if key in ("alias", "sample_len") or metric.endswith("_stderr") or not isinstance(value, int | float):
            continue
        stderr = metrics.get(f"{metric}_stderr,{filtering}")
        name = metric if filtering in ("", "none") else f"{metric},{filtering}"
        out[name] = Estimate(float(value), float(stderr) if isinstance(stderr, int | float) else None, n)
    return out


def _samples(logged: Sequence[Mapping[str, Any]], metric_names: Sequence[str]) -> list[SampleRecord]:
    records = []
    for sample in logged:
        arguments = sample.get("arguments")
        first = arguments[0] if isinstance(arguments, list | tuple) and arguments else arguments
        if isinstance(first, Mapping):  # newer harnesses log {"gen_args_0": {"arg_0": ..., ...}}
            first = next(iter(first.values()), {})
            first = list(first.values()) if isinstance(first, Mapping) else first
        prompt = str(first[0]) if isinstance(first, list | tuple) and first else str(first)
        grade = next((float(sample[m]) for m in metric_names if isinstance(sample.get(m), int | float)), 0.0)
        records.append(
            SampleRecord(
                prompt,
                str(sample.get("filtered_resps")),
                grade,
                f"target {sample.get('target')!r}",
                {"doc_id": sample.get("doc_id")},
            )
        )
    return records


def run_lm_eval(
    target: CheckpointTarget,
    specs: Sequence[str],
    shared: Mapping[str, Any],
    overrides: Sequence[str],
    out: Path | None,
) -> tuple[list[dict[str, Any]], Path]:
    """Run the harness tasks on the target; write and return kitchen's result rows."""
    try:
        import lm_eval
        from lm_eval.tasks import TaskManager
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    from kitchen.apps.eval.lm_eval_model import KitchenLM
    from kitchen.families.evaluation.target import describe, open_model

    base = {key: shared[key] for key in ("limit", "seed") if shared.get(key) is not None}
    settings = load_config(HarnessSettings, None, list(overrides), base=base)
    names, folders = _task_names(specs)
    manager = TaskManager(include_path=folders or None)
    unknown = [name for name in names if name not in manager.all_tasks]
    if unknown:
        close = difflib.get_close_matches(unknown[0], manager.all_tasks, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown lm-eval task {unknown[0]!r}{hint}")
    started = time.time()

    async def go() -> dict[str, Any]:
        async with open_model(target) as model:
            lm = KitchenLM(model, asyncio.get_running_loop(), settings.seed, settings.max_length)
            return await asyncio.to_thread(
                lm_eval.simple_evaluate,
                model=lm,
                tasks=names,
                task_manager=manager,
                num_fewshot=settings.num_fewshot,
                limit=settings.limit,
                random_seed=settings.seed,
                numpy_random_seed=settings.seed,
                torch_random_seed=settings.seed,
                fewshot_random_seed=settings.seed,
                apply_chat_template=settings.chat_template,
                system_instruction=settings.system_instruction,
                bootstrap_iters=settings.bootstrap_iters,
                log_samples=True,
            )

    results = asyncio.run(go())
    outcomes = []
    for name in names:
        metrics = _metric_rows(results, name)
        logged = results.get("samples", {}).get(name, [])
        outcomes.append(
            TaskOutcome(name, settings.model_dump(mode="json"), TaskResult(metrics, _samples(logged, list(metrics))))
        )
    header = {
        "model": describe(target),
        "harness": f"lm-eval {getattr(lm_eval, '__version__', '')}".strip(),
        "checkpoint": target.record.name if target.record is not None else None,
        "seed": settings.seed,
        "created": datetime.fromtimestamp(started).astimezone().isoformat(timespec="seconds"),
        "seconds": round(time.time() - started, 3),
        "config": {
            "backend": target.config.backend,
            "model_name": target.config.model_name,
            "renderer": target.renderer,
        },
    }
    out_dir = out or default_out_dir(target.run_dir, target.config.model_name, started)
    write_results(out_dir, outcomes, header)
    return result_rows(outcomes, describe(target), settings.seed), out_dir
