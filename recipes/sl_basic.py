"""sl_basic: supervised fine-tuning on prompt/completion (or plain text) JSONL.

Defaults train the embedded tiny model on the shipped instruction set, offline, in about a minute.
"""

from __future__ import annotations

from pydantic import Field

from kitchen.config import Count, Rate
from kitchen.data.loading import shipped_data
from kitchen.data.supervised import PromptCompletion
from kitchen.recipe import Recipe
from kitchen.workflow import Workflow
from kitchen.workflows.supervised import supervised_workflow
from recipes.supervised_config import SupervisedConfig


class Config(SupervisedConfig):
    dataset: str = Field(default_factory=lambda: shipped_data("sl_basic/train.jsonl"))
    eval_dataset: str | None = Field(default_factory=lambda: shipped_data("sl_basic/test.jsonl"))
    prompt_key: str = "prompt"
    completion_key: str = "completion"
    text_key: str = "text"
    learning_rate: Rate = 3e-3
    batch_size: Count = 32
    num_epochs: Count = 2


def workflow(config: Config) -> Workflow:
    return supervised_workflow(PromptCompletion(config.prompt_key, config.completion_key, config.text_key))


RECIPE = Recipe(
    name="sl_basic",
    description="supervised fine-tuning on prompt/completion or text JSONL",
    config_cls=Config,
    workflow=workflow,
)
