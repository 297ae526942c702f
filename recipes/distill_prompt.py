"""distill_prompt: prompt distillation. A teacher answers prompts under a long system prompt; the
student is fine-tuned on (prompt without the system prompt -> the teacher's answer), so it learns
to behave as the teacher does when told.

Defaults run offline on the embedded tiny model: the shipped arithmetic teacher answers addition
questions under an instruction-style system prompt, and the student (the tiny base model) learns
its answers. Generation is batched, written to `RUN_DIR/distill/` before training and not repeated
on resume; `teacher.generated_dataset=DIR` reuses an earlier run's. Metrics: `eval/nll_initial`
and `eval/nll` (the student's held-out NLL of the teacher's answers, without the system prompt)
and `eval/teacher_nll` (the teacher's, with it: the floor).
"""

from __future__ import annotations

from kitchen import CheckpointSettings, DataSettings, HeldOutEval, OptimizerSettings, OtherModel, Recipe, defaults
from kitchen.families.distillation import PromptDistillationSettings, TeacherSettings, prompt_distillation_workflow
from recipes.data import shipped_data

SYSTEM_PROMPT = (
    "You are a patient arithmetic tutor. Each question asks for the sum of two whole numbers. "
    "Work out the sum carefully, check it once more, and then reply with the number alone, "
    "without any words, units or punctuation, so that it can be read by a program."
)


@defaults(
    data=DataSettings(
        dataset=shipped_data("distill/prompts_train.jsonl"),
        eval_dataset=shipped_data("distill/prompts_test.jsonl"),
        batch_size=32,
        num_epochs=3,
        max_length=128,
    ),
    teacher=TeacherSettings(
        system_prompt=SYSTEM_PROMPT,
        model=OtherModel(checkpoint=shipped_data("teachers/arithmetic")),
        max_tokens=8,
    ),
    optimizer=OptimizerSettings(learning_rate=3e-3),
    eval=HeldOutEval(every=10),
    checkpoint=CheckpointSettings(save_every=0),
)
class Config(PromptDistillationSettings):
    pass


RECIPE = Recipe(
    name="distill_prompt",
    description="prompt distillation: fine-tune on a teacher's answers given without its system prompt",
    config_cls=Config,
    workflow=lambda config: prompt_distillation_workflow(),
)
