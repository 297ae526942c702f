"""The supervised workflow's settings; sl_basic and chat_sl subclass them, each with the `data`
section of its record format."""

from __future__ import annotations

from pydantic import Field

from kitchen.families.common.settings import DataSettings, RendererSettings, TrainingSettings
from train_core.renderers.train_on_what import TrainOnWhat


class SupervisedSettings(TrainingSettings):
    """Train on a data set's examples with cross-entropy, in epochs of shuffled batches."""

    data: DataSettings = Field(..., description="the train and held-out files, batches and epochs")


class ChatSupervisedSettings(SupervisedSettings, RendererSettings):
    """Supervised training on conversations rendered by a chat renderer."""


class PromptCompletionData(DataSettings):
    """Config section `data` of prompt/completion (or plain text) records (`PromptCompletion`)."""

    prompt_key: str = Field("prompt", description="record key of the prompt (no loss)")
    completion_key: str = Field("completion", description="record key of the completion (trained on)")
    text_key: str = Field("text", description="record key of plain text (all tokens trained on)")


class ConversationData(DataSettings):
    """Config section `data` of conversation records (`Conversation`)."""

    train_on_what: TrainOnWhat = Field(TrainOnWhat.ALL_ASSISTANT_MESSAGES, description="messages that carry loss")
    messages_key: str = Field("messages", description="record key of the conversation")
