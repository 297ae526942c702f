"""The supervised workflow's settings; sl_basic and chat_sl subclass them."""

from __future__ import annotations

from kitchen.families.common.settings import DatasetSettings, OptimizerSettings, RendererSettings


class SupervisedSettings(DatasetSettings, OptimizerSettings):
    """Train on a data set's examples with cross-entropy, in epochs of shuffled batches."""


class ChatSupervisedSettings(SupervisedSettings, RendererSettings):
    """Supervised training on conversations rendered by a chat renderer."""
