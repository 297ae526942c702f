"""Supervised fine-tuning: settings, stages and the workflow (`supervised_workflow`).

The family's public names, for recipes and users' own workflows (recipes import from here, never
from the modules below)."""

from kitchen.families.supervised.examples import Conversation as Conversation
from kitchen.families.supervised.examples import ExampleBuilder as ExampleBuilder
from kitchen.families.supervised.examples import PromptCompletion as PromptCompletion
from kitchen.families.supervised.settings import ChatSupervisedSettings as ChatSupervisedSettings
from kitchen.families.supervised.settings import ConversationData as ConversationData
from kitchen.families.supervised.settings import PromptCompletionData as PromptCompletionData
from kitchen.families.supervised.settings import SupervisedSettings as SupervisedSettings
from kitchen.families.supervised.stages import Batch as Batch
from kitchen.families.supervised.stages import EvaluateNLL as EvaluateNLL
from kitchen.families.supervised.stages import GetSupervisedBatch as GetSupervisedBatch
from kitchen.families.supervised.stages import LoadSupervisedData as LoadSupervisedData
from kitchen.families.supervised.workflow import supervised_workflow as supervised_workflow
