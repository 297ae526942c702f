"""The evaluation task interface and where task and grader names come from.

A task is a plain object whose `evaluate` function takes the model under test (a sampling client,
its renderer and tokenizer) and the task's settings, and returns per-sample records and metrics.
`kitchen eval` calls it; so can a training stage (the `evals:` list of a recipe config), which is
why it knows nothing of the CLI or of run directories.

Names come from the `kitchen.eval_tasks` and `kitchen.graders` entry-point groups
(`kitchen.engine.plugins`). kitchen's own tasks (supervised NLL, preference accuracy, a user's JSONL
with a grader) and graders (math, exact) are declared there like any package's; the shipped recipes
add their RL sets (arithmetic, GSM8K, code) the same way, so kitchen names no recipe.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kitchen.engine.plugins import ExtensionPoint, own_recipes_package
from kitchen.engine.ports import SamplingClient, Tokenizer
from train_core.eval_stats import Estimate
from train_core.renderers.base import Renderer
from train_core.types import SamplingParams


class EvalSettings(BaseModel):
    """Settings every task reads; a task with more subclasses it (its `settings`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    limit: int | None = Field(None, ge=1, description="evaluate only the first N items of the task")
    samples: int = Field(1, ge=1, description="samples per item; pass@k and maj@k need more than one")
    seed: int = Field(0, description="derives every request's sampling seed: same seed, same samples")
    temperature: float = Field(1.0, ge=0, description="sampling temperature (0: greedy)")
    max_tokens: int = Field(256, ge=1, description="most tokens sampled per reply")
    concurrency: int = Field(64, ge=1, description="items whose requests are in flight at once")
    thinking_budget: int | None = Field(
        None,
        ge=1,
        description="most thinking tokens of a reasoning model's reply, part of max_tokens: a reply still "
        "thinking then has its think block closed and answers in the rest (default: no budget)",
    )

    @model_validator(mode="after")
    def _budget_leaves_room_to_answer(self) -> EvalSettings:
        if self.thinking_budget is not None and self.thinking_budget >= self.max_tokens:
            raise ValueError(
                f"thinking_budget ({self.thinking_budget}) must be below max_tokens ({self.max_tokens}): "
                "the answer is written in the tokens the thinking leaves"
            )
        return self

    def sampling_params(self, seed: int, stop: Any) -> SamplingParams:
        return SamplingParams(max_tokens=self.max_tokens, temperature=self.temperature, seed=seed, stop=stop)


@dataclass(frozen=True)
class EvalModel:
    """The model under test, and how to reach others on the same backend."""

    sampler: SamplingClient
    renderer: Renderer
    tokenizer: Tokenizer
    name: str
    """What is evaluated, for the results: a checkpoint path or a model name."""
    open_sampler: Callable[[str], Awaitable[SamplingClient]]
    """A sampling client on another model of this backend: a checkpoint path, or a base model
    name (a preference task's reference)."""
    reference: str | None = None
    """The model the target was trained against, where its run recorded one (DPO's frozen
    reference, as a checkpoint path), else its base model name."""
    run_config: Mapping[str, Any] = field(default_factory=dict)
    """The config of the run that made the target (empty for a bare model)."""
    open_tokenizer: Callable[[str], Tokenizer] | None = None
    """The tokenizer of another model of this backend, by name (a judge's)."""


@dataclass(frozen=True)
class SampleRecord:
    """One graded sample: what the model saw, what it said, its grade and why."""

    prompt: str
    response: str
    grade: float
    reason: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Task-specific fields (item index, sample index, reference answer, ...)."""


@dataclass(frozen=True)
class TaskResult:
    metrics: Mapping[str, Estimate]
    samples: list[SampleRecord]


@dataclass(frozen=True)
class EvalTask:
    """A named evaluation. `evaluate(model, settings)` gets an instance of `settings`."""

    name: str
    description: str
    evaluate: Callable[[EvalModel, Any], Coroutine[Any, Any, TaskResult]]
    settings: type[EvalSettings] = EvalSettings


GraderFn = Callable[[Any, str, Mapping[str, Any]], Any]
"""A grader: (prompt, response, record) -> a grade (a bool, a number, or a dict with correct, score,
reason, answer), or an awaitable of one."""


def _task(name: str, obj: Any) -> EvalTask:
    if not isinstance(obj, EvalTask) or obj.name != name:
        raise TypeError(f"is not an EvalTask named {name!r}")
    return obj


def _grader(name: str, obj: Any) -> GraderFn:
    if not callable(obj):
        raise TypeError("is not a grader (a callable of prompt, response, record)")
    grader: GraderFn = obj
    return grader


TASKS: ExtensionPoint[EvalTask] = ExtensionPoint("kitchen.eval_tasks", "task", _task)
GRADERS: ExtensionPoint[GraderFn] = ExtensionPoint("kitchen.graders", "grader", _grader)


def eval_tasks() -> dict[str, EvalTask]:
    """Every task by name."""
    own_recipes_package()  # the shipped tasks come from kitchen's own recipes, never a cwd namesake
    return TASKS.load()


def graders() -> dict[str, GraderFn]:
    """Every named grader."""
    return GRADERS.load()


def get_task(name: str) -> EvalTask:
    """The task called `name`; an unknown one is a ConfigError with a "did you mean"."""
    own_recipes_package()
    return TASKS.get(name)
