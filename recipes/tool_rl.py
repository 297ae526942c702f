"""tool_rl: RL for tool use. Arithmetic on numbers too big to do by heart, with a `calculator`
tool declared in the renderer's native tool format; the model must call it well-formed, read
the result and answer with it.

Defaults run on the embedded tiny model, offline, on CPU: the tiny tokenizer carries Qwen3's
special tokens, so the run uses `qwen3_instruct` (a renderer with a native tool format; one
without is refused at validation). A warm start imitates a teacher whose call is invalid
`env.teacher_error_rate` of the time (it then guesses); RL raises both the valid-call rate
(`env/all/tools/call_valid`) and the reward (`env/all/reward/total`: 1 for the exact answer,
`env/all/correct`, plus `env.tool_bonus` for an accepted call, `env/all/used_calculator`).

The RL learning rate is 3e-4, not math_rl's 1e-3: the tiny model never answers exactly, so the
only signal is the bonus on a few call tokens, and steps of 1e-3 (Adam's moments start afresh
after the warm start, so every weight moves by about the learning rate, ~3% of the weights'
scale) break the call format within two steps (valid-call rate to 0; issue 42). At 1e-4 it does
not learn in 25 steps; 5e-4 is already unsteady.
"""

from __future__ import annotations

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults, renderer_name
from kitchen.families.rl import RLLoopSettings, RLSettings, WarmStartSettings, rl_workflow_for
from recipes.envs.calculator import CalculatorSettings, calculator_task
from train_core.renderers.base import Renderer
from train_core.renderers.registry import check_tool_renderer
from train_core.rl.task import RLTask


@defaults(
    renderer="qwen3_instruct",
    optimizer=OptimizerSettings(learning_rate=3e-4),
    sampling=SamplingSettings(max_tokens=40),
    rl=RLLoopSettings(group_size=8, groups_per_batch=8, num_batches=25),
    eval=HeldOutEval(every=10),
    warm_start=WarmStartSettings(steps=100),
)
class Config(RLSettings):
    env: CalculatorSettings = Field(default_factory=CalculatorSettings, description="the problems and the tool")


def build_task(config: Config, renderer: Renderer) -> RLTask:
    env = config.env
    return calculator_task(
        renderer,
        num_batches=config.rl.num_batches,
        groups_per_batch=config.rl.groups_per_batch,
        group_size=config.rl.group_size,
        digits=env.digits,
        max_turns=env.max_turns,
        num_eval_problems=env.num_eval_problems,
        seed=config.seed,
        teacher_error_rate=env.teacher_error_rate,
        tool_bonus=env.tool_bonus,
    )


def check_renderer(config: Config, roles: frozenset[str]) -> None:
    """The renderer must declare tools natively; refused by name before anything starts."""
    check_tool_renderer(renderer_name(config))


RECIPE = Recipe(
    name="tool_rl",
    description="RL for tool use: big-number arithmetic with a calculator tool",
    config_cls=Config,
    workflow=rl_workflow_for(build_task, check_renderer),
)
