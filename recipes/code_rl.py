"""code_rl: RL on code problems, graded by running the model's code against the problem's tests in
a sandbox (bubblewrap by default, a plain process where bubblewrap is missing, or a SandboxFusion
server for scale: `sandbox=sandboxfusion sandbox.url=http://...`).

Defaults run offline on the embedded tiny model: a sloppy-teacher warm start on the shipped
function-writing problems (its solution is subtly wrong `env.teacher_error_rate` of the time),
then RL paid only for passing tests, which unlearns the slips: the pass rate of the last 5 of the
25 steps beats the first 5 by 0.35-0.45 at seeds 0-2 (tests/e2e/test_code_rl.py asks 0.15 of
each). No eval by default: the held-out problems have names the tiny model never saw, and each
eval costs sandbox time.
DeepCoder-style problem files load with `--config recipes/configs/code_rl_deepcoder.yaml env.dataset=...`.
"""

from __future__ import annotations

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults
from kitchen.families.rl import RLLoopSettings, RLSettings, WarmStartSettings, rl_workflow_for
from recipes.data import shipped_data
from recipes.envs.code import CodeSettings, SandboxSettings, code_task, load_problem_sets
from train_core.renderers.base import Renderer
from train_core.rl.task import RLTask


@defaults(
    optimizer=OptimizerSettings(learning_rate=3e-4),
    sampling=SamplingSettings(max_tokens=48),
    rl=RLLoopSettings(group_size=8, groups_per_batch=8, num_batches=25, transcript_groups=2),
    eval=HeldOutEval(every=0),
    warm_start=WarmStartSettings(steps=300),
)
class Config(RLSettings):
    env: CodeSettings = Field(
        default_factory=lambda: CodeSettings(
            dataset=shipped_data("code/train.jsonl"), eval_dataset=shipped_data("code/test.jsonl")
        ),
        description="the problem files, the format penalty and the warm start",
    )
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings, description="where the model's programs run")


def build_task(config: Config, renderer: Renderer) -> RLTask:
    return code_task(config.env, config.sandbox, config, renderer)


def check_problems(config: Config, roles: frozenset[str]) -> None:
    load_problem_sets(config.env)


RECIPE = Recipe(
    name="code_rl",
    description="RL on code problems graded by running the code against tests in a sandbox",
    config_cls=Config,
    workflow=rl_workflow_for(build_task, check_problems),
)
