"""sl_basic: supervised fine-tuning on prompt/completion (or plain text) JSONL.

Defaults train the embedded tiny model on the shipped instruction set, offline, in about a minute.
"""

from __future__ import annotations

from pydantic import Field

from kitchen.config import defaults
from kitchen.recipe import Recipe
from kitchen.supervised.examples import PromptCompletion
from kitchen.supervised.settings import SupervisedSettings
from kitchen.supervised.workflow import supervised_workflow
from kitchen.workflow import Workflow
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
