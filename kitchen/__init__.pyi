# ruff: noqa: I001  (grouped by purpose, not sorted)
# kitchen's public names, written once: this stub is what type checkers read, and `kitchen/__init__.py`
# loads each name from the module given here on first use (so `import kitchen` stays cheap).

# composing workflows
from kitchen.engine.stage import Live as Live
from kitchen.engine.stage import Persisted as Persisted
from kitchen.engine.stage import Stage as Stage
from kitchen.engine.workflow import ConfigCount as ConfigCount
from kitchen.engine.workflow import ConfigPredicate as ConfigPredicate
from kitchen.engine.workflow import Loop as Loop
from kitchen.engine.workflow import Node as Node
from kitchen.engine.workflow import Parallel as Parallel
from kitchen.engine.workflow import When as When
from kitchen.engine.workflow import Workflow as Workflow
from kitchen.engine.workflow import WorkflowBuilder as WorkflowBuilder
from kitchen.engine.workflow import every as every
from kitchen.engine.workflow import render_tree as render_tree

# running them
from kitchen.engine.context import Context as Context
from kitchen.engine.hooks import Hooks as Hooks
from kitchen.engine.launch import RunDir as RunDir
from kitchen.engine.launch import run_recipe as run_recipe
from kitchen.engine.runner import Runner as Runner
from kitchen.engine.runner import StageFailure as StageFailure
from kitchen.engine.runner import run_stage as run_stage
from kitchen.engine.runs.checkpoints import resolve_sampler_path as resolve_sampler_path
from kitchen.engine.runs.metrics import read_metrics as read_metrics
from kitchen.engine.validation import validate_recipe as validate_recipe

# recipes and config
from kitchen.engine.config.loading import defaults as defaults
from kitchen.engine.config.loading import load_config as load_config
from kitchen.engine.config.renames import ConfigKeyRenamed as ConfigKeyRenamed
from kitchen.engine.config.run import Count as Count
from kitchen.engine.config.run import NonNegative as NonNegative
from kitchen.engine.config.run import Rate as Rate
from kitchen.engine.config.run import RunConfig as RunConfig
from kitchen.engine.config.sections import ConfigRef as ConfigRef
from kitchen.engine.config.sections import RESUME_SAFE as RESUME_SAFE
from kitchen.engine.config.sections import RUN_LENGTH as RUN_LENGTH
from kitchen.engine.config.sections import Section as Section
from kitchen.engine.recipe import Recipe as Recipe
from kitchen.engine.recipe import get_recipe as get_recipe
from kitchen.engine.recipe import recipe_names as recipe_names

# the sections every training family shares, and the families' settings
from kitchen.families.common.checkpoint import CheckpointSettings as CheckpointSettings
from kitchen.families.common.settings import DataSettings as DataSettings
from kitchen.families.common.settings import HeldOutEval as HeldOutEval
from kitchen.families.common.settings import OptimizerSettings as OptimizerSettings
from kitchen.families.common.settings import OtherModel as OtherModel
from kitchen.families.common.settings import RendererSettings as RendererSettings
from kitchen.families.common.settings import SamplingSettings as SamplingSettings
from kitchen.families.common.settings import TrainingSettings as TrainingSettings
from kitchen.families.common.setup import renderer_name as renderer_name
from kitchen.families.preference.settings import PreferenceSettings as PreferenceSettings
from kitchen.families.rl.settings import RLSettings as RLSettings
from kitchen.families.supervised.settings import ChatSupervisedSettings as ChatSupervisedSettings
from kitchen.families.supervised.settings import SupervisedSettings as SupervisedSettings

# data and renderers
from kitchen.engine.renderers import image_renderer_names as image_renderer_names
from kitchen.engine.renderers import renderer_takes_images as renderer_takes_images
from kitchen.engine.runs.datasets import build_all as build_all
from kitchen.engine.runs.datasets import is_hub_name as is_hub_name

# backends: the ports and the registry
from kitchen.engine.backends import BackendSpec as BackendSpec
from kitchen.engine.backends import backend_specs as backend_specs
from kitchen.engine.backends import get_backend_spec as get_backend_spec
from kitchen.engine.backends import register_backend as register_backend
from kitchen.engine.ports import SamplingClient as SamplingClient
from kitchen.engine.ports import ServiceBackend as ServiceBackend
from kitchen.engine.ports import Tokenizer as Tokenizer
from kitchen.engine.ports import TrainingClient as TrainingClient

# errors
from kitchen.engine.errors import ConfigError as ConfigError
from kitchen.engine.errors import DataError as DataError
from kitchen.engine.errors import KitchenError as KitchenError
from kitchen.engine.errors import StageError as StageError
from kitchen.engine.errors import WiringError as WiringError

__version__: str
