"""chat_sl: supervised fine-tuning on conversations (`{"messages": [...]}` JSONL) through a chat
renderer. `renderer` defaults to the one recommended for `model_name`; `train_on_what` picks the
messages that carry loss."""

from __future__ import annotations

from pydantic import Field

from kitchen.config import Count, Rate
from kitchen.data.loading import shipped_data
from kitchen.data.supervised import Conversation
from kitchen.recipe import Recipe
from kitchen.workflow import Workflow
from kitchen.workflows.supervised import supervised_workflow
from recipes.supervised_config import SupervisedConfig
from train_core.renderers.train_on_what import TrainOnWhat


class Config(SupervisedConfig):
    dataset: str = Field(default_factory=lambda: shipped_data("chat_sl/train.jsonl"))
    eval_dataset: str | None = Field(default_factory=lambda: shipped_data("chat_sl/test.jsonl"))
    renderer: str | None = Field(None, description="renderer name; default: recommended for model_name")
    train_on_what: TrainOnWhat = TrainOnWhat.ALL_ASSISTANT_MESSAGES
    messages_key: str = "messages"
    learning_rate: Rate = 3e-3
    batch_size: Count = 32
    num_epochs: Count = 2


def workflow(config: Config) -> Workflow:
    return supervised_workflow(Conversation(config.train_on_what, config.messages_key), needs_renderer=True)


RECIPE = Recipe(
    name="chat_sl",
    description="supervised fine-tuning on conversations through a chat renderer",
    config_cls=Config,
    workflow=workflow,
)
