"""sl_basic: supervised fine-tuning on prompt/completion (or plain text) JSONL.

Defaults train the embedded tiny model on the shipped instruction set, offline, in about a minute.
"""

from __future__ import annotations

from pydantic import Field

from kitchen.engine.config.loading import defaults
from kitchen.engine.recipe import Recipe
from kitchen.engine.workflow import Workflow
from kitchen.families.supervised.examples import PromptCompletion
from kitchen.families.supervised.settings import SupervisedSettings
from kitchen.families.supervised.workflow import supervised_workflow
from recipes.data import shipped_data


@defaults(
    dataset=shipped_data("sl_basic/train.jsonl"),
    eval_dataset=shipped_data("sl_basic/test.jsonl"),
    learning_rate=3e-3,
    num_epochs=2,
)
class Config(SupervisedSettings):
    prompt_key: str = Field("prompt", description="record key of the prompt (no loss)")
    completion_key: str = Field("completion", description="record key of the completion (trained on)")
    text_key: str = Field("text", description="record key of plain text (all tokens trained on)")


def workflow(config: Config) -> Workflow:
    return supervised_workflow(PromptCompletion(config.prompt_key, config.completion_key, config.text_key))


RECIPE = Recipe(
    name="sl_basic",
    description="supervised fine-tuning on prompt/completion or text JSONL",
    config_cls=Config,
    workflow=workflow,
)
