"""code_rl: RL on code problems, graded by running the model's code against the problem's tests in
a sandbox (bubblewrap by default, a plain process where bubblewrap is missing, or a SandboxFusion
server for scale: `sandbox=sandboxfusion sandbox_url=http://...`).

Defaults run offline on the embedded tiny model: a sloppy-teacher warm start on the shipped
function-writing problems (its solution is subtly wrong `teacher_error_rate` of the time), then
RL paid only for passing tests, which unlearns the slips: the pass rate of the last 5 of the 25
steps beats the first 5 by at least 0.15 (tests/e2e/test_code_rl.py). No eval by default: the
held-out problems have names the tiny model never saw, and each eval costs sandbox time.
DeepCoder-style problem files load with `--config recipes/configs/code_rl_deepcoder.yaml dataset=...`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from pydantic import Field, model_validator

from kitchen.engine.config.loading import Count, defaults
from kitchen.engine.recipe import Recipe
from kitchen.families.rl.settings import RLSettings
from kitchen.families.rl.workflow import rl_workflow_for
from recipes.data import shipped_data
from recipes.envs.code import (
    CodeDataset,
    CodeDemonstrations,
    CodeGroupBuilder,
    CodeProblem,
    load_code_problems,
    weak_tests_warning,
)
from sandbox import SandboxKind, make_sandbox
from sandbox.factory import UNSAFE_SANDBOX_SETTING
from sandbox.local import LocalSandbox
from sandbox.process import PROCESS_SANDBOX_WARNING, ProcessSandbox
from train_core.renderers.base import Renderer
from train_core.rl.task import RLTask


@defaults(
    learning_rate=3e-4,
    max_tokens=48,
    group_size=8,
    groups_per_batch=8,
    num_batches=25,
    eval_every=0,
    warm_start_steps=300,
    transcript_groups=2,
)
class Config(RLSettings):
    dataset: str = Field(shipped_data("code/train.jsonl"), description="code problems JSONL (DeepCoder-style)")
    eval_dataset: str | None = Field(shipped_data("code/test.jsonl"), description="held-out problems; none = no eval")
    sandbox: SandboxKind = Field(
        "auto", description="auto (bubblewrap, else process) | bubblewrap | process | sandboxfusion"
    )
    sandbox_url: str | None = Field(None, description="the SandboxFusion server (sandbox=sandboxfusion only)")
    sandbox_concurrency: Count = Field(8, description="programs run at once")
    sandbox_timeout_s: float = Field(10.0, gt=0, description="wall-clock limit of one program")
    allow_unsafe_sandbox: bool = Field(
        False,
        description="let RL run on the process sandbox (no network or filesystem isolation); otherwise refused",
    )
    format_coef: float = Field(0.1, ge=0, description="reward penalty for a reply without a ```python block")
    teacher_error_rate: float = Field(0.6, ge=0, le=1, description="warm start: share of demonstrations that are wrong")

    @model_validator(mode="after")
    def _url_with_sandboxfusion(self) -> Config:
        if (self.sandbox_url is not None) != (self.sandbox == "sandboxfusion"):
            raise ValueError("sandbox_url is set exactly when sandbox is sandboxfusion")
        return self

    @model_validator(mode="after")
    def _process_sandbox_only_when_allowed(self) -> Config:
        """Refused here, so `kitchen validate` says so before a warm start is spent."""
        if self.sandbox == "process" and not self.allow_unsafe_sandbox:
            raise ValueError(
                f"sandbox=process is not safe for RL (no network or filesystem isolation): use bubblewrap or "
                f"sandboxfusion, or set {UNSAFE_SANDBOX_SETTING}: true to accept the risk"
            )
        return self


def load_problem_sets(config: Config) -> tuple[Sequence[CodeProblem], Sequence[CodeProblem]]:
    """The train and held-out problems; a bad record is an error naming its file and line."""
    return load_code_problems(config.dataset), load_code_problems(config.eval_dataset) if config.eval_dataset else []


def check_problems(config: Config, roles: frozenset[str]) -> None:
    load_problem_sets(config)


def build_task(config: Config, renderer: Renderer) -> RLTask:
    sandbox = make_sandbox(
        config.sandbox, config.sandbox_url, config.sandbox_concurrency, allow_process=config.allow_unsafe_sandbox
    )
    group = partial(
        CodeGroupBuilder,
        renderer=renderer,
        sandbox=sandbox,
        group_size=config.group_size,
        format_coef=config.format_coef,
        timeout_s=config.sandbox_timeout_s,
    )
    problems, held_out = load_problem_sets(config)
    warnings = [weak_tests_warning(config.dataset, problems)]
    if isinstance(sandbox, ProcessSandbox):
        warnings.append(f"{UNSAFE_SANDBOX_SETTING}: programs run in the process sandbox. {PROCESS_SANDBOX_WARNING}")
    notes: list[str] = []
    if isinstance(sandbox, LocalSandbox):  # a soft (watchdog) bound is a warning, the kernel's a note
        limits = f"sandbox total limits per program: {sandbox.total_limits()}"
        (notes if sandbox.cgroups is not None else warnings).append(limits)
    return RLTask(
        train=CodeDataset(problems, config.groups_per_batch, config.seed, group),
        eval_builders=[group(problem) for problem in held_out],
        demonstrations=CodeDemonstrations(problems, config.teacher_error_rate),
        warnings=[warning for warning in warnings if warning],
        notes=notes,
    )


RECIPE = Recipe(
    name="code_rl",
    description="RL on code problems graded by running the code against tests in a sandbox",
    config_cls=Config,
    workflow=rl_workflow_for(build_task, check_problems),
)
