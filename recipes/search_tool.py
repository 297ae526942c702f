"""search_tool: RL of retrieval-augmented answering. Questions about a corpus are answered with a
`search` tool (kitchen's BM25 index over the corpus, built once and cached by the corpus's hash),
declared and called in the renderer's native tool format; the reply after `Answer:` is graded
against the gold answer (tinker-cookbook's Search-R1 recipe, with BM25 in place of a vector store).

Defaults run on the embedded tiny model, offline, on CPU with `qwen3_instruct` over the shipped
corpus of 60 invented islands (`env.corpus`, `env.questions` take yours), whose names and answers
are one token each where they stand, so answering is copying a token into the query and one from
the result. The tool is declared with no descriptions, so the prompt is mostly the renderer's
fixed tool preamble (~293 tiny tokens in all). A warm start imitates a teacher who searches and
answers from the result (and guesses without searching `env.teacher_error_rate` of the time); the
held-out reward is `eval/all/reward/total`. The tiny model does not learn this task yet: it does
not copy (its query names another island), so almost no held-out episode is correct and RL only
learns to skip the search; given a long warm start it learns the training questions by heart
instead (measured in docs/tutorials/search-tool.md).
"""

from __future__ import annotations

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults, renderer_name
from kitchen.families.rl import RLLoopSettings, RLSettings, WarmStartSettings, rl_workflow_for
from recipes.envs.search import SearchSettings, load_questions, search_task
from train_core.renderers.base import Renderer
from train_core.renderers.registry import check_tool_renderer
from train_core.rl.task import RLTask


@defaults(
    renderer="qwen3_instruct",
    optimizer=OptimizerSettings(learning_rate=1e-3),
    sampling=SamplingSettings(max_tokens=24),
    rl=RLLoopSettings(group_size=4, groups_per_batch=8, num_batches=20),
    eval=HeldOutEval(every=10),
    warm_start=WarmStartSettings(steps=150),
)
class Config(RLSettings):
    env: SearchSettings = Field(default_factory=SearchSettings, description="the corpus, its questions and the tool")


def build_task(config: Config, renderer: Renderer) -> RLTask:
    return search_task(config.env, config, renderer)


def check(config: Config, roles: frozenset[str]) -> None:
    """The renderer must declare tools natively; the questions must read."""
    check_tool_renderer(renderer_name(config))
    load_questions(config.env.questions)
    if config.env.held_out is not None:
        load_questions(config.env.held_out)


RECIPE = Recipe(
    name="search_tool",
    description="RL of retrieval-augmented answering: a BM25 search tool over a corpus, answers graded",
    config_cls=Config,
    workflow=rl_workflow_for(build_task, check),
)
