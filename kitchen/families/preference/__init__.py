"""Preference learning: DPO and its variants, online DPO, XPO and Nash-MD, KTO, Bradley-Terry and process
reward models, learned pairwise judges and the judges runs use, with their settings sections and
workflows.

The family's public names, for recipes and users' own workflows (recipes import from here, never
from the modules below)."""

from kitchen.families.preference.bradley_terry import reward_model_workflow as reward_model_workflow
from kitchen.families.preference.judges import LEARNED_JUDGES as LEARNED_JUDGES
from kitchen.families.preference.judges import PREFERENCE_MODEL as PREFERENCE_MODEL
from kitchen.families.preference.judges import REWARD_MODEL as REWARD_MODEL
from kitchen.families.preference.judges import ProvideJudge as ProvideJudge
from kitchen.families.preference.judges import judge_setup as judge_setup
from kitchen.families.preference.kto import kto_workflow as kto_workflow
from kitchen.families.preference.nash_md import NashMDMixture as NashMDMixture
from kitchen.families.preference.nash_md import NashMDSettings as NashMDSettings
from kitchen.families.preference.nash_md import nash_md_workflow as nash_md_workflow
from kitchen.families.preference.online_dpo import online_dpo_workflow as online_dpo_workflow
from kitchen.families.preference.process_reward import ProcessRewardSettings as ProcessRewardSettings
from kitchen.families.preference.process_reward import process_reward_workflow as process_reward_workflow
from kitchen.families.preference.reward_model import EvaluatePreferenceModel as EvaluatePreferenceModel
from kitchen.families.preference.reward_model import WriteComparisonConversations as WriteComparisonConversations
from kitchen.families.preference.reward_model import check_comparison_files as check_comparison_files
from kitchen.families.preference.reward_model import read_comparisons as read_comparisons
from kitchen.families.preference.settings import ComparisonData as ComparisonData
from kitchen.families.preference.settings import ComparisonFiles as ComparisonFiles
from kitchen.families.preference.settings import DPOLoss as DPOLoss
from kitchen.families.preference.settings import JudgeEvalSettings as JudgeEvalSettings
from kitchen.families.preference.settings import JudgeSettings as JudgeSettings
from kitchen.families.preference.settings import KTOLoss as KTOLoss
from kitchen.families.preference.settings import KTOSettings as KTOSettings
from kitchen.families.preference.settings import OnlineDPOSettings as OnlineDPOSettings
from kitchen.families.preference.settings import PreferenceSettings as PreferenceSettings
from kitchen.families.preference.settings import RewardModelHead as RewardModelHead
from kitchen.families.preference.settings import RewardModelSettings as RewardModelSettings
from kitchen.families.preference.settings import WinRateSettings as WinRateSettings
from kitchen.families.preference.stages import EvaluateWinRate as EvaluateWinRate
from kitchen.families.preference.stages import Judge as Judge
from kitchen.families.preference.workflow import preference_workflow as preference_workflow
from kitchen.families.preference.xpo import XPOLoss as XPOLoss
from kitchen.families.preference.xpo import XPOSettings as XPOSettings
from kitchen.families.preference.xpo import xpo_workflow as xpo_workflow
