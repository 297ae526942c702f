"""chat_sl: supervised fine-tuning on conversations (`{"messages": [...]}` JSONL) through a chat
renderer. `renderer` defaults to the one recommended for `model_name`; `train_on_what` picks the
messages that carry loss."""

from __future__ import annotations

from pydantic import Field

from kitchen.engine.config.loading import defaults
from kitchen.engine.recipe import Recipe
from kitchen.engine.renderers import renderer_takes_images
from kitchen.engine.workflow import Workflow
from kitchen.families.common.setup import renderer_name
from kitchen.families.supervised.examples import Conversation
from kitchen.families.supervised.settings import ChatSupervisedSettings
from kitchen.families.supervised.workflow import supervised_workflow
from recipes.data import shipped_data
from train_core.renderers.train_on_what import TrainOnWhat


@defaults(
    dataset=shipped_data("chat_sl/train.jsonl"),
    eval_dataset=shipped_data("chat_sl/test.jsonl"),
    learning_rate=3e-3,
    num_epochs=2,
)
class Config(ChatSupervisedSettings):
    train_on_what: TrainOnWhat = Field(TrainOnWhat.ALL_ASSISTANT_MESSAGES, description="messages that carry loss")
    messages_key: str = Field("messages", description="record key of the conversation")


def workflow(config: Config) -> Workflow:
    images = renderer_takes_images(renderer_name(config))  # a vision-language renderer takes image parts
    return supervised_workflow(Conversation(config.train_on_what, config.messages_key, images), needs_renderer=True)


RECIPE = Recipe(
    name="chat_sl",
    description="supervised fine-tuning on conversations through a chat renderer",
    config_cls=Config,
    workflow=workflow,
)
