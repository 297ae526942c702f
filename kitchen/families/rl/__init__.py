"""Reinforcement learning (GRPO-style): settings sections, stages grouped by phase (sampling,
update, stream-minibatch and async modes, warm start), environments by name and the workflow
builder with its slots.

The family's public names, for recipes and users' own workflows (recipes import from here, never
from the modules below)."""

from kitchen.families.rl.algorithm_settings import AlgorithmSettings as AlgorithmSettings
from kitchen.families.rl.envs import CHOICE as CHOICE
from kitchen.families.rl.envs import ENVS as ENVS
from kitchen.families.rl.envs import EnvSettings as EnvSettings
from kitchen.families.rl.envs import EnvSpec as EnvSpec
from kitchen.families.rl.envs import env_check as env_check
from kitchen.families.rl.envs import env_choice as env_choice
from kitchen.families.rl.envs import env_task as env_task
from kitchen.families.rl.evaluation import EvaluateRewards as EvaluateRewards
from kitchen.families.rl.numerics import CheckLogprobAgreement as CheckLogprobAgreement
from kitchen.families.rl.numerics import NumericsSettings as NumericsSettings
from kitchen.families.rl.reward_env import REWARD_FN_ENV as REWARD_FN_ENV
from kitchen.families.rl.reward_env import RewardFnSettings as RewardFnSettings
from kitchen.families.rl.settings import EpisodeSettings as EpisodeSettings
from kitchen.families.rl.settings import RLLoopSettings as RLLoopSettings
from kitchen.families.rl.settings import RLSettings as RLSettings
from kitchen.families.rl.settings import WarmStartSettings as WarmStartSettings
from kitchen.families.rl.step import ApplyKLPenalty as ApplyKLPenalty
from kitchen.families.rl.workflow import rl_workflow as rl_workflow
from kitchen.families.rl.workflow import rl_workflow_for as rl_workflow_for
