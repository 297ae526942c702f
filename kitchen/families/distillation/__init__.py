"""Distillation: on-policy (the RL workflow with a teacher-KL adjuster) and prompt distillation
(the supervised workflow on a teacher's answers).

The family's public names, for recipes and users' own workflows (recipes import from here, never
from the modules below)."""

from kitchen.families.distillation.settings import OnPolicyDistillationSettings as OnPolicyDistillationSettings
from kitchen.families.distillation.settings import PromptDistillationSettings as PromptDistillationSettings
from kitchen.families.distillation.settings import TeacherDataset as TeacherDataset
from kitchen.families.distillation.settings import TeacherSettings as TeacherSettings
from kitchen.families.distillation.stages import load_prompts as load_prompts
from kitchen.families.distillation.workflow import (
    on_policy_distillation_workflow_for as on_policy_distillation_workflow_for,
)
from kitchen.families.distillation.workflow import prompt_distillation_workflow as prompt_distillation_workflow
