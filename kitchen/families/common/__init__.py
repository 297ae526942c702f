"""What the training families share: the optimizer, renderer and data settings sections, setup
stages (backend, tokenizer, renderer, training client), the optimizer step and its guards,
checkpoint stages, the train loop, and request helpers over the ports.

The stages a user's own workflow composes are exported here (the settings sections are `kitchen`'s)."""

from kitchen.families.common.checkpoint import SaveCheckpoint as SaveCheckpoint
from kitchen.families.common.setup import CloseBackend as CloseBackend
from kitchen.families.common.setup import CreateReferenceClient as CreateReferenceClient
from kitchen.families.common.setup import CreateTrainingClient as CreateTrainingClient
from kitchen.families.common.setup import GetTokenizer as GetTokenizer
from kitchen.families.common.setup import MakeRenderer as MakeRenderer
from kitchen.families.common.train_loop import pipelined_training as pipelined_training
from kitchen.families.common.training import CollectTrainStep as CollectTrainStep
from kitchen.families.common.training import SubmitTrainStep as SubmitTrainStep
