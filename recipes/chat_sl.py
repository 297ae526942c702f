"""chat_sl: supervised fine-tuning on conversations (`{"messages": [...]}` JSONL) through a chat
renderer. `renderer` defaults to the one recommended for `model_name`; `data.train_on_what` picks
the messages that carry loss."""

from __future__ import annotations

from pydantic import Field

from kitchen import OptimizerSettings, Recipe, Workflow, defaults, renderer_name, renderer_takes_images
from kitchen.families.supervised import ChatSupervisedSettings, Conversation, ConversationData, supervised_workflow
from recipes.data import shipped_data


@defaults(optimizer=OptimizerSettings(learning_rate=3e-3))
class Config(ChatSupervisedSettings):
    data: ConversationData = Field(
        default_factory=lambda: ConversationData(
            dataset=shipped_data("chat_sl/train.jsonl"), eval_dataset=shipped_data("chat_sl/test.jsonl"), num_epochs=2
        ),
        description="the conversation files, which messages carry loss, batches and epochs",
    )


def workflow(config: Config) -> Workflow:
    images = renderer_takes_images(renderer_name(config))  # a vision-language renderer takes image parts
    builder = Conversation(config.data.train_on_what, config.data.messages_key, images)
    return supervised_workflow(builder, needs_renderer=True)


RECIPE = Recipe(
    name="chat_sl",
    description="supervised fine-tuning on conversations through a chat renderer",
    config_cls=Config,
    workflow=workflow,
)
