"""Distillation: on-policy (the RL workflow with a teacher-KL adjuster), prompt distillation
(the supervised workflow on a teacher's answers), reasoning distillation (the supervised workflow
on a teacher's reasoning traces, thinking trained or masked), GKD (the RL workflow's sampling with a generalized-JSD
update on student, teacher or data-set completions) and self-distillation (the RL workflow's sampling
with a top-K cross-entropy update against the model prompted with a demonstration).

The family's public names, for recipes and users' own workflows (recipes import from here, never
from the modules below)."""

from kitchen.families.distillation.gkd import GKDSection as GKDSection
from kitchen.families.distillation.gkd import GKDSettings as GKDSettings
from kitchen.families.distillation.gkd import gkd_workflow_for as gkd_workflow_for
from kitchen.families.distillation.self_distillation import SelfDistillationSection as SelfDistillationSection
from kitchen.families.distillation.self_distillation import SelfDistillationSettings as SelfDistillationSettings
from kitchen.families.distillation.self_distillation import (
    self_distillation_workflow_for as self_distillation_workflow_for,
)
from kitchen.families.distillation.settings import AnsweringTeacher as AnsweringTeacher
from kitchen.families.distillation.settings import OnPolicyDistillationSettings as OnPolicyDistillationSettings
from kitchen.families.distillation.settings import PromptDistillationSettings as PromptDistillationSettings
from kitchen.families.distillation.settings import ReasoningData as ReasoningData
from kitchen.families.distillation.settings import ReasoningDistillationSettings as ReasoningDistillationSettings
from kitchen.families.distillation.settings import TeacherDataset as TeacherDataset
from kitchen.families.distillation.settings import TeacherSettings as TeacherSettings
from kitchen.families.distillation.stages import load_prompts as load_prompts
from kitchen.families.distillation.workflow import (
    on_policy_distillation_workflow_for as on_policy_distillation_workflow_for,
)
from kitchen.families.distillation.workflow import prompt_distillation_workflow as prompt_distillation_workflow
from kitchen.families.distillation.workflow import (
    reasoning_distillation_workflow as reasoning_distillation_workflow,
)
