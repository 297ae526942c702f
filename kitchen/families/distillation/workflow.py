"""Distillation workflows, built from the RL and supervised workflows' slots rather than copies.

- On-policy: the RL workflow (any mode) on prompt-only envs, with each data set's teacher opened
  and checked in `setup`, its reverse KL folded into the advantages as the `adjust` stage, the
  teacher's own held-out reward measured once, and the student's held-out KL to it evaluated.
- Prompt distillation: the supervised workflow on the teacher's answers, generated (once) before
  the data is loaded.
- Reasoning distillation: the supervised workflow on a teacher's reasoning traces (a file of them,
  or generated once by a teacher model), its think blocks trained or masked.
"""

from __future__ import annotations

from kitchen.engine.config.sections import ConfigRef
from kitchen.engine.workflow import Node, When, Workflow, WorkflowBuilder
from kitchen.families.common.settings import OtherModel
from kitchen.families.common.setup import CheckTokenizerMatch, OpenOtherModel
from kitchen.families.distillation.settings import (
    AnsweringTeacher,
    OnPolicyDistillationSettings,
    ReasoningDistillationSettings,
    TeacherSettings,
)
from kitchen.families.distillation.stages import (
    ApplyTeacherKL,
    EvaluateTeacherFloor,
    EvaluateTeacherKL,
    GenerateTeacherAnswers,
    GenerateTraces,
    OpenTeachers,
)
from kitchen.families.rl.evaluation import EvaluateRewards
from kitchen.families.rl.setup import WarmStart
from kitchen.families.rl.workflow import fresh_run, rl_workflow
from kitchen.families.supervised.examples import Conversation
from kitchen.families.supervised.stages import EvaluateNLL
from kitchen.families.supervised.workflow import supervised_workflow
from train_core.rl.task import DataCheck, RLTaskFactory


def on_policy_distillation_workflow_for(factory: RLTaskFactory, check_data: DataCheck | None = None) -> WorkflowBuilder:
    """A recipe's `workflow(config)` for on-policy distillation in the configured RL mode."""

    def build(config: OnPolicyDistillationSettings) -> Workflow:
        teachers = [teacher_of(index) for index in range(len(config.datasets))]
        setup: list[Node] = [CheckTokenizerMatch(teachers)]
        if config.warm_start.steps > 0:
            setup.append(When("fresh_start", fresh_run, [WarmStart()]))
        setup.append(OpenTeachers())
        # The teacher's own held-out reward, once (a resumed run has it in its first rows already).
        teacher_eval = EvaluateRewards("teacher_eval", "evaluate_teacher", client_key="teacher_client")
        setup.append(When("teacher_baseline", fresh_run, [teacher_eval]))
        return rl_workflow(
            factory,
            config.rl.mode,
            setup=setup,
            adjust=[ApplyTeacherKL()],
            evaluators=[EvaluateTeacherKL()],
            check_data=check_data,
        )

    return WorkflowBuilder("on-policy distillation", (OnPolicyDistillationSettings,), build)


def teacher_of(index: int) -> ConfigRef[OnPolicyDistillationSettings, OtherModel]:
    """The teacher of data set `index` (`datasets.<index>.teacher`)."""
    return ConfigRef(OnPolicyDistillationSettings, lambda config: config.datasets[index].teacher)


PROMPT_TEACHER = ConfigRef(TeacherSettings, lambda teacher: teacher.model)
"""Prompt distillation's teacher (`teacher.model`)."""


def prompt_distillation_workflow(messages_key: str = "messages") -> Workflow:
    """Fine-tune on the teacher's answers without the system prompt; `eval/nll_initial` before the
    first step, `eval/nll` after, and the teacher's own floor `eval/teacher_nll`."""
    return supervised_workflow(
        Conversation(messages_key=messages_key),
        needs_renderer=True,
        name="prompt_distillation",
        prepare_data=[
            CheckTokenizerMatch([PROMPT_TEACHER]),
            OpenOtherModel(PROMPT_TEACHER, "teacher_client", "teacher_path", name="open_teacher"),
            GenerateTeacherAnswers(),
            EvaluateTeacherFloor(),
        ],
        before_training=[EvaluateNLL("eval/nll_initial", name="evaluate_initial_nll")],
    )


REASONING_TEACHER = ConfigRef(
    ReasoningDistillationSettings, lambda config: (config.teacher or AnsweringTeacher()).model
)
"""Reasoning distillation's teacher (`teacher.model`), where one writes the traces."""


def reasoning_distillation_workflow(config: ReasoningDistillationSettings) -> Workflow:
    """Fine-tune on reasoning traces (`data.dataset`'s, or `teacher`'s replies to its prompts,
    generated once), the think blocks trained unless `data.train_thinking` is off; `eval/nll_initial`
    before the first step and `eval/nll` after, over what is trained of the held-out traces."""
    data = config.data
    builder = Conversation(data.train_on_what, data.messages_key, train_thinking=data.train_thinking)
    generate: list[Node] = []
    if config.teacher is not None:
        generate = [
            CheckTokenizerMatch([REASONING_TEACHER]),
            OpenOtherModel(REASONING_TEACHER, "teacher_client", "teacher_path", name="open_teacher"),
            GenerateTraces(),
        ]
    return supervised_workflow(
        builder,
        needs_renderer=True,
        name="reasoning_distillation",
        prepare_data=generate,
        before_training=[EvaluateNLL("eval/nll_initial", name="evaluate_initial_nll")],
    )
