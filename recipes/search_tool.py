"""search_tool: RL of retrieval-augmented answering. Questions about a corpus are answered with a
`search` tool (kitchen's BM25 index over the corpus, built once and cached by the corpus's hash),
declared and called in the renderer's native tool format; the reply after `Answer:` is graded
against the gold answer (tinker-cookbook's Search-R1 recipe, with BM25 in place of a vector store).

Defaults run on the embedded `tiny32` model, offline, on CPU with `qwen3_instruct` over the
shipped corpus of 60 invented islands with two facts each, one document per fact (`env.corpus`,
`env.questions`, `env.held_out` take yours). Every token the model writes is a copy from a fixed
distance back: the query is the question (`land-aby?` -> `search("land-aby")`, one token each for
the kind and the name) and the answer is the result's last token. The tool is declared with no
descriptions (~275-token prompts). A warm start imitates a teacher who searches and answers from
the result (`env.teacher_error_rate` of the time it answers without searching; 0 by default, as
skipped searches kept the model from learning the copy); the held-out metric is
`eval/all/search/correct`. After the warm start (700 steps of 16 at 4e-3) `tiny32` answers
0.51, 0.99 and 0.28 of the held-out questions at seeds 0, 1, 2, copying from the question and the
result; 20 RL steps do not add to it (0.51 -> 0.50, 0.99 -> 1.0, 0.28 -> 0.32), nor do 60 at
5e-4-1e-3 at every seed (seed 1 has no headroom; elsewhere RL learns training questions by heart),
so learning is not asserted (measured in docs/tutorials/search-tool.md).
"""

from __future__ import annotations

from pydantic import Field

from kitchen import HeldOutEval, OptimizerSettings, Recipe, SamplingSettings, defaults, renderer_name
from kitchen.families.rl import RLLoopSettings, RLSettings, WarmStartSettings, rl_workflow_for
from recipes.envs.search import SearchSettings, check_questions, search_task
from train_core.renderers.base import Renderer
from train_core.renderers.registry import check_tool_renderer
from train_core.rl.task import RLTask


@defaults(
    model_name="tiny32",
    renderer="qwen3_instruct",
    optimizer=OptimizerSettings(learning_rate=3e-4),
    sampling=SamplingSettings(max_tokens=24),
    rl=RLLoopSettings(group_size=4, groups_per_batch=8, num_batches=20),
    eval=HeldOutEval(every=10),
    warm_start=WarmStartSettings(steps=700, batch_size=16, learning_rate=4e-3),
)
class Config(RLSettings):
    env: SearchSettings = Field(default_factory=SearchSettings, description="the corpus, its questions and the tool")


def build_task(config: Config, renderer: Renderer) -> RLTask:
    return search_task(config.env, config, renderer)


def check(config: Config, roles: frozenset[str]) -> None:
    """The renderer must declare tools natively; the questions must read and ask about the corpus."""
    check_tool_renderer(renderer_name(config))
    check_questions(config.env)


RECIPE = Recipe(
    name="search_tool",
    description="RL of retrieval-augmented answering: a BM25 search tool over a corpus, answers graded",
    config_cls=Config,
    workflow=rl_workflow_for(build_task, check),
)
