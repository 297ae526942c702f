"""Evaluation during training, as every recipe's config declares it in its `eval` section: the
`tasks` list (which task, how often, on how many items, sampled how) and `best_checkpoint` (the
metric that picks the checkpoint `kitchen eval RUN --checkpoint best` evaluates and
`checkpoint.keep_last` never deletes).

    eval:
      tasks:
        - {task: arithmetic, every: 5, limit: 32, temperature: 0.0}
        - {task: nll, name: held_out_nll, every: 10, settings: {dataset: held_out.jsonl}}
      best_checkpoint: {metric: eval/arithmetic/accuracy, mode: max}

Only pydantic here: `kitchen.engine.config.loading` builds every recipe's config on it, so task names and
settings are checked (against the task registry, loaded on first use) when the config is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kitchen.engine.config.sections import Section

EVAL_PREFIX = "eval"
"""Metrics of an eval during training are `eval/<name>/<metric>`."""


class TrainingEval(BaseModel):
    """One evaluation run every `every` steps on the weights after that step."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    task: str = Field(
        description="a registered eval task: arithmetic, gsm8k, code, jsonl, nll, preference, or a plugin's"
    )
    name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.@-]+$",
        description="the metrics' prefix eval/<name>/...; default the task name (set it to run a task twice)",
    )
    every: int = Field(ge=1, strict=True, description="run after every N steps (and after the last step)")
    background: bool = Field(
        True,
        description="run while training goes on (its metrics row is written when it finishes); "
        "false: the step waits for it",
    )
    limit: int | None = Field(None, ge=1, description="evaluate only the first N items of the task")
    samples: int | None = Field(None, ge=1, description="samples per item (pass@k, maj@k need more than one)")
    seed: int | None = Field(None, description="sampling seed; default the task's (0): every evaluation samples alike")
    temperature: float | None = Field(None, ge=0, description="sampling temperature; default the run's, else 1.0")
    max_tokens: int | None = Field(None, ge=1, description="most tokens per reply; default the run's, else 256")
    thinking_budget: int | None = Field(
        None, ge=1, description="most thinking tokens per reply, part of max_tokens (set both); default none"
    )
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="the task's own settings (dataset, grader, max_operand, ...), as kitchen eval's TASK.key=value",
    )

    @property
    def label(self) -> str:
        return self.name or self.task

    def shared(self) -> dict[str, Any]:
        """The sampling settings given here (None: left to the task or the run)."""
        keys = ("limit", "samples", "seed", "temperature", "max_tokens", "thinking_budget")
        return {key: getattr(self, key) for key in keys if getattr(self, key) is not None}

    def task_settings(self, run_defaults: dict[str, Any]) -> Any:
        """The task's settings model for this eval: `run_defaults` (the run's temperature,
        max_tokens), under what this entry sets; raises a ValueError naming the bad key."""
        from kitchen.engine.eval_tasks import get_task

        task = get_task(self.task)  # a ConfigError (a ValueError) with a "did you mean"
        fields = task.settings.model_fields
        values = {k: v for k, v in run_defaults.items() if k in fields}
        values.update(self.shared())
        unknown = sorted(set(self.settings) - set(fields))
        if unknown:
            raise ValueError(f"task {self.task!r} has no setting {unknown[0]!r} (it has: {', '.join(sorted(fields))})")
        values.update(self.settings)
        from pydantic import ValidationError

        try:
            return task.settings.model_validate(values)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(map(str, error["loc"])) or "settings"
            raise ValueError(f"task {self.task!r}: {where}: {error['msg'].removeprefix('Value error, ')}") from None

    @model_validator(mode="after")
    def _task_and_settings(self) -> TrainingEval:
        budgeted = self.thinking_budget is not None or "thinking_budget" in self.settings
        if budgeted and self.max_tokens is None and "max_tokens" not in self.settings:
            raise ValueError(
                f"eval task {self.label!r}: thinking_budget is a part of max_tokens: set max_tokens beside it"
            )
        self.task_settings({})
        return self


class BestCheckpoint(BaseModel):
    """Which metric names the best checkpoint."""

    model_config = ConfigDict(extra="forbid")

    metric: str = Field(min_length=1, description="a logged metric, e.g. eval/arithmetic/accuracy")
    mode: Literal["max", "min"] = Field("max", description="max: higher is better; min: lower is better")


class EvalSchedule(Section):
    """Config section `eval`: evaluation during training (every recipe's config has it; a training
    family's adds the period of its own held-out evaluation)."""

    FLAT: ClassVar[Mapping[str, str]] = {"tasks": "evals"}

    tasks: list[TrainingEval] = Field(
        default_factory=list,
        description="eval tasks run during training: [{task, every, limit, samples, temperature, max_tokens, "
        "thinking_budget, settings}], logged as eval/<task>/<metric>",
    )
    best_checkpoint: BestCheckpoint | None = Field(
        None,
        description="{metric, mode}: the step checkpoint with the best value of metric is recorded in "
        "best_checkpoint.json, kept from keep_last pruning, and evaluated by kitchen eval RUN --checkpoint best",
    )

    @field_validator("tasks")
    @classmethod
    def _unique_names(cls, tasks: list[TrainingEval]) -> list[TrainingEval]:
        seen: set[str] = set()
        for entry in tasks:
            if entry.label in seen:
                raise ValueError(f"two eval tasks are named {entry.label!r}; give one a different 'name'")
            seen.add(entry.label)
        return tasks

    @model_validator(mode="after")
    def _metric_of_an_eval(self) -> EvalSchedule:
        """A metric `eval/<x>/...` whose `x` is close to an eval's name but is none is a typo (the
        recipes' own held-out metrics, `eval/all/...`, are no eval's and pass)."""
        import difflib

        best = self.best_checkpoint
        match = re.match(rf"^{EVAL_PREFIX}/([^/]+)/", best.metric) if best is not None else None
        labels = [entry.label for entry in self.tasks]
        if best is not None and match and match.group(1) not in labels:
            close = difflib.get_close_matches(match.group(1), labels, n=1)
            if close:
                raise ValueError(
                    f"best_checkpoint.metric {best.metric!r} names no eval {match.group(1)!r}; did you mean "
                    f"{close[0]!r}?"
                )
        return self
