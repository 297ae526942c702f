"""terminal_rl: multi-turn RL on terminal tasks in Harbor's task format (Terminal-Bench 2), in
kitchen's bubblewrap sandbox: the policy issues one shell command a turn and sees its output,
until it replies DONE or reaches `env.max_turns`; the task's own tests/test.sh then grades the
environment it left (its reward file is the reward).

Tasks whose Dockerfile kitchen can replay offline run (FROM, one WORKDIR, COPY, ENV, LABEL and
RUN of file commands; see recipes/envs/harbor_tasks.py); any other is refused naming the task
and the line, or skipped with `env.unsupported=skip`. Four small tasks ship in
recipes/data/terminal, their held-out twins (same instructions, other files and answers) in
recipes/data/terminal_eval. The defaults learn on the embedded tiny model: a warm start imitates
a teacher who sends the task's own reference solution half of the time and another task's
otherwise (the commands, only weakly which fits which task), then 32 RL steps with a light KL
loss to the warm-started policy raise the held-out solve rate from about 0.35 to about 0.6-0.75
(docs/how-to/terminal-tasks.md). An episode is one turn by default (`env.max_turns=1`: the
command, then the tests), which keeps runs repeatable: a later turn's observation can hold a
pipeline's error lines in racing order, and its sampling batches by when the sandbox answered.
"""

from __future__ import annotations

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults
from kitchen.families.rl import AlgorithmSettings, RLLoopSettings, RLSettings, WarmStartSettings, rl_workflow_for
from recipes.data import shipped_data
from recipes.envs.harbor_tasks import load_harbor_tasks
from recipes.envs.terminal import TerminalSettings, terminal_task
from sandbox import make_sandbox
from train_core.renderers.base import Renderer
from train_core.rl.task import RLTask


@defaults(
    optimizer=OptimizerSettings(learning_rate=5e-4),
    sampling=SamplingSettings(max_tokens=64),
    rl=RLLoopSettings(group_size=8, groups_per_batch=4, num_batches=32),
    algorithm=AlgorithmSettings(kl_loss_coef=0.1),
    eval=HeldOutEval(every=32),
    warm_start=WarmStartSettings(steps=150),
)
class Config(RLSettings):
    env: TerminalSettings = Field(
        default_factory=lambda: TerminalSettings(
            tasks=shipped_data("terminal"),
            eval_tasks=shipped_data("terminal_eval"),
            max_turns=1,
            eval_episodes=32,
            teacher_match_rate=0.5,
        ),
        description="the Harbor tasks, their held-out twins and the episode's limits",
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
