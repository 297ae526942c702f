"""sl_basic: supervised fine-tuning on prompt/completion (or plain text) JSONL.

Defaults train the embedded tiny model on the shipped instruction set, offline, in about a minute.
"""

from __future__ import annotations

from pydantic import Field

from kitchen import OptimizerSettings, Recipe, Workflow, defaults
from kitchen.families.supervised import PromptCompletion, PromptCompletionData, SupervisedSettings, supervised_workflow
from recipes.data import shipped_data


@defaults(optimizer=OptimizerSettings(learning_rate=3e-3))
class Config(SupervisedSettings):
    data: PromptCompletionData = Field(
        default_factory=lambda: PromptCompletionData(
            dataset=shipped_data("sl_basic/train.jsonl"), eval_dataset=shipped_data("sl_basic/test.jsonl"), num_epochs=2
        ),
        description="the train and held-out files, their record keys, batches and epochs",
    )


def workflow(config: Config) -> Workflow:
    data = config.data
    return supervised_workflow(PromptCompletion(data.prompt_key, data.completion_key, data.text_key))


RECIPE = Recipe(
    name="sl_basic",
    description="supervised fine-tuning on prompt/completion or text JSONL",
    config_cls=Config,
    workflow=workflow,
)
