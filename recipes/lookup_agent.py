"""lookup_agent: RL of an agent written as ordinary code against the `openai` client
(recipes/agents/lookup.py): questions about a small shipped corpus of (fictional) towns, answered
with two tools, `search` and `read` (the environment: recipes/envs/lookup.py). kitchen gives each
episode an OpenAI-compatible base URL and its own key, serves every chat completion from the
policy, and trains exactly the tokens sampled.

Defaults run on the embedded tiny model, offline, on CPU with `qwen3_instruct` (a renderer with a
native tool format).
"""

from __future__ import annotations

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults, renderer_name
from kitchen.families.rl import RLLoopSettings, RLSettings, WarmStartSettings, rl_workflow_for
from recipes.agents.lookup import CORPUS, Corpus
from recipes.envs.lookup import LookupSettings, load_questions, lookup_task
from train_core.renderers.base import Renderer
from train_core.renderers.registry import check_tool_renderer
from train_core.rl.task import RLTask


@defaults(
    renderer="qwen3_instruct",
    optimizer=OptimizerSettings(learning_rate=1e-3),
    sampling=SamplingSettings(max_tokens=40),
    rl=RLLoopSettings(group_size=4, groups_per_batch=4, num_batches=20),
    eval=HeldOutEval(every=10),
    warm_start=WarmStartSettings(steps=60),
)
class Config(RLSettings):
    env: LookupSettings = Field(default_factory=LookupSettings, description="the agent's budget and the questions")


def build_task(config: Config, renderer: Renderer) -> RLTask:
    return lookup_task(config.env, config, renderer)


def check(config: Config, roles: frozenset[str]) -> None:
    """The renderer must declare tools natively (refused by name); the shipped data must read."""
    check_tool_renderer(renderer_name(config))
    load_questions()
    Corpus.load(CORPUS)


RECIPE = Recipe(
    name="lookup_agent",
    description="RL of an openai-client agent: two-tool lookup (search, read) over a small corpus",
    config_cls=Config,
    workflow=rl_workflow_for(build_task, check),
)
