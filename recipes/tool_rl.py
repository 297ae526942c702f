"""tool_rl: RL for tool use. Arithmetic on numbers too big to do by heart, with a `calculator`
tool declared in the renderer's native tool format; the model must call it well-formed, read
the result and answer with it.

Defaults run on the embedded tiny model, offline, on CPU: the tiny tokenizer carries Qwen3's
special tokens, so the run uses `qwen3_instruct` (a renderer with a native tool format; one
without is refused at validation). A warm start imitates a teacher whose call is invalid
`teacher_error_rate` of the time (it then guesses); RL raises both the valid-call rate
(`env/all/tools/call_valid`) and the reward (`env/all/reward/total`: 1 for the exact answer,
`env/all/correct`, plus `tool_bonus` for an accepted call, `env/all/used_calculator`).
"""

from __future__ import annotations

from pydantic import Field

from kitchen.engine.config.loading import defaults
from kitchen.engine.recipe import Recipe
from kitchen.families.common.setup import renderer_name
from kitchen.families.rl.settings import RLSettings
from kitchen.families.rl.workflow import rl_workflow_for
from recipes.envs.calculator import calculator_task
from train_core.renderers.base import Renderer
from train_core.renderers.registry import check_tool_renderer
from train_core.rl.task import RLTask


@defaults(
    renderer="qwen3_instruct",
    learning_rate=1e-3,
    max_tokens=40,
    group_size=8,
    groups_per_batch=8,
    num_batches=25,
    eval_every=10,
    warm_start_steps=100,
)
class Config(RLSettings):
    digits: int = Field(2, ge=1, le=9, description="digits of each operand")
    max_turns: int = Field(3, ge=1, description="model turns per episode (tool calls plus the answer)")
    num_eval_problems: int = Field(8, ge=0, description="size of the held-out set")
    teacher_error_rate: float = Field(
        0.4, ge=0, le=1, description="share of warm-start episodes whose call is invalid (then a guess)"
    )
    tool_bonus: float = Field(
        0.5, ge=0, description="reward for an episode whose calculator call was accepted, on top of 1 for the answer"
    )


def build_task(config: Config, renderer: Renderer) -> RLTask:
    return calculator_task(
        renderer,
        num_batches=config.num_batches,
        groups_per_batch=config.groups_per_batch,
        group_size=config.group_size,
        digits=config.digits,
        max_turns=config.max_turns,
        num_eval_problems=config.num_eval_problems,
        seed=config.seed,
        teacher_error_rate=config.teacher_error_rate,
        tool_bonus=config.tool_bonus,
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
