"""The distillation workflows' settings; the distillation recipes subclass them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kitchen.engine.config.loading import defaults
from kitchen.engine.config.run import Count
from kitchen.engine.config.sections import Section
from kitchen.families.common.settings import OtherModel
from kitchen.families.rl.algorithm_settings import AlgorithmSettings
from kitchen.families.rl.settings import RLSettings
from kitchen.families.supervised.settings import ChatSupervisedSettings, ConversationData


class TeacherDataset(BaseModel):
    """One prompt set of on-policy distillation, with the teacher its replies are scored by."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$", description="its metrics: teacher_kl/<name>, env/<name>/...")
    prompts: str = Field(
        ..., description='JSONL of {"prompt": ...} or {"messages": [...]}, or a recipe\'s built-in set'
    )
    teacher: OtherModel = OtherModel.model_validate({})
    groups_per_batch: Count | None = Field(None, description="its share of rl.groups_per_batch; default: an even split")


@defaults(algorithm=AlgorithmSettings(loss_fn="importance_sampling", kl_penalty_coef=1.0))
class OnPolicyDistillationSettings(RLSettings):
    """RL on prompt-only envs whose only signal is the teachers' reverse KL (`algorithm.kl_penalty_coef`
    and `algorithm.kl_discount_factor` weigh it here; there is no reference-model penalty)."""

    datasets: list[TeacherDataset] = Field(..., min_length=1, description="prompt sets, each with its teacher")

    @model_validator(mode="after")
    def _shares_fill_the_batch(self) -> OnPolicyDistillationSettings:
        names = [d.name for d in self.datasets]
        if len(set(names)) != len(names):
            raise ValueError(f"datasets: names must be unique, got {names}")
        shares = [d.groups_per_batch for d in self.datasets]
        total = self.rl.groups_per_batch
        if all(share is None for share in shares):
            if total % len(shares):
                raise ValueError(
                    f"rl.groups_per_batch ({total}) does not split evenly over {len(shares)} datasets; "
                    "give each dataset its groups_per_batch"
                )
        elif any(share is None for share in shares) or sum(s or 0 for s in shares) != total:
            raise ValueError(f"datasets' groups_per_batch {shares} must all be set and sum to rl.groups_per_batch")
        return self

    def share(self, index: int) -> int:
        """Groups per step of dataset `index`."""
        return self.datasets[index].groups_per_batch or self.rl.groups_per_batch // len(self.datasets)


class AnsweringTeacher(Section):
    """Config section `teacher` of reasoning distillation: the model whose answers to the prompts
    become the training data, and how it answers."""

    model: OtherModel = Field(
        default_factory=lambda: OtherModel.model_validate({}), description="the model that answers; default: model_name"
    )
    max_tokens: Count = Field(64, description="most tokens of one teacher answer")
    temperature: float = Field(1.0, ge=0, description="sampling temperature of the teacher's answers")
    generated_dataset: str | None = Field(
        None, description="a directory with train.jsonl (and eval.jsonl) from an earlier generation: skip generating"
    )


class TeacherSettings(AnsweringTeacher):
    """Config section `teacher` of prompt distillation: the model that answers under the system
    prompt, and how it answers."""

    FLAT: ClassVar[Mapping[str, str]] = {
        "model": "teacher",
        "system_prompt": "system_prompt",
        "generated_dataset": "generated_dataset",
    }
    FLAT_PREFIX: ClassVar[str] = "teacher_"

    system_prompt: str = Field(..., description="what the teacher is told and the student must learn without")


class PromptDistillationSettings(ChatSupervisedSettings):
    """Fine-tune on a teacher's answers to `data.dataset`'s prompts, given without `teacher.system_prompt`."""

    teacher: TeacherSettings = Field(..., description="the model that answers, told the system prompt")


class ReasoningData(ConversationData):
    """Config section `data` of reasoning distillation: conversations whose assistant messages carry
    their reasoning under `thinking` (or prompts, when a `teacher` writes the traces)."""

    train_thinking: bool = Field(
        True, description="train the reasoning (think blocks) of the trained messages too; false: only the answer"
    )


class ReasoningDistillationSettings(ChatSupervisedSettings):
    """Fine-tune on a teacher's reasoning traces: `data.dataset` holds them, or, with `teacher`,
    holds prompts the teacher answers (its reasoning kept) before training."""

    data: ReasoningData = Field(..., description="the traces (or prompts), which messages and spans carry loss")
    teacher: AnsweringTeacher | None = Field(
        None, description="a model that writes the traces for data.dataset's prompts; none: the data holds traces"
    )
