"""terminal_rl: multi-turn RL on terminal tasks in Harbor's task format (Terminal-Bench 2), in
kitchen's bubblewrap sandbox: the policy issues one shell command a turn and sees its output,
until it replies DONE or reaches `env.max_turns`; the task's own tests/test.sh then grades the
environment it left (its reward file is the reward).

Tasks whose Dockerfile kitchen can replay offline run (FROM, one WORKDIR, COPY, ENV, LABEL and
RUN of file commands; see recipes/envs/harbor_tasks.py); any other is refused naming the task
and the line, or skipped with `env.unsupported=skip`. Four small tasks ship in
recipes/data/terminal, their held-out twins (same instructions, other files and answers) in
recipes/data/terminal_eval. `warm_start.steps=N` imitates the tasks' reference solutions
(`env.teacher_match_rate` < 1 mixes in other tasks' solutions). The defaults are a smoke run on
the embedded tiny model, which has never seen a shell: no learning is claimed for it, and RL
after a warm start did not raise the held-out solve rate in the runs measured
(docs/how-to/terminal-tasks.md).
"""

from __future__ import annotations

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults
from kitchen.families.rl import RLLoopSettings, RLSettings, rl_workflow_for
from recipes.data import shipped_data
from recipes.envs.harbor_tasks import load_harbor_tasks
from recipes.envs.terminal import TerminalSettings, terminal_task
from sandbox import make_sandbox
from train_core.renderers.base import Renderer
from train_core.rl.task import RLTask


@defaults(
    optimizer=OptimizerSettings(learning_rate=1e-4),
    sampling=SamplingSettings(max_tokens=64),
    rl=RLLoopSettings(group_size=4, groups_per_batch=3, num_batches=4),
    eval=HeldOutEval(every=0),
)
class Config(RLSettings):
    env: TerminalSettings = Field(
        default_factory=lambda: TerminalSettings(tasks=shipped_data("terminal")),
        description="the Harbor tasks and the episode's limits",
    )


def build_task(config: Config, renderer: Renderer) -> RLTask:
    sandbox = make_sandbox("bubblewrap", concurrency=config.env.concurrency)
    rl = config.rl
    return terminal_task(
        config.env,
        sandbox,
        renderer,
        group_size=rl.group_size,
        groups_per_batch=rl.groups_per_batch,
        num_batches=rl.num_batches,
        seed=config.seed,
    )


def check_tasks(config: Config, roles: frozenset[str]) -> None:
    skip = config.env.unsupported == "skip"
    load_harbor_tasks(config.env.tasks, skip)
    if config.env.eval_tasks:
        load_harbor_tasks(config.env.eval_tasks, skip)


RECIPE = Recipe(
    name="terminal_rl",
    description="multi-turn RL on Harbor-format terminal tasks: shell commands in the bubblewrap sandbox",
    config_cls=Config,
    workflow=rl_workflow_for(build_task, check_tasks),
)
