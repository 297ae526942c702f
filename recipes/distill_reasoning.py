"""distill_reasoning: off-policy reasoning distillation. The student is fine-tuned on a teacher's
reasoning traces (assistant messages with their `thinking`), from a JSONL of traces or written by
a teacher model (`teacher.model`, any backend) for `data.dataset`'s prompts; `data.train_thinking`
trains the reasoning too (the default) or masks it, so only the answer after it carries loss.

Defaults run offline on the embedded tiny model with the `qwen3` renderer (think blocks between
`<think>` and `</think>`): two-digit additions whose shipped traces reason column by column
(`recipes/data/reasoning`). Metrics: `eval/nll_initial` and `eval/nll`, the held-out NLL of what is
trained of the test traces (reasoning and answer, or the answer alone).
"""

from __future__ import annotations

from kitchen import CheckpointSettings, HeldOutEval, OptimizerSettings, Recipe, defaults
from kitchen.families.distillation import ReasoningData, ReasoningDistillationSettings, reasoning_distillation_workflow
from recipes.data import shipped_data


@defaults(
    renderer="qwen3",
    data=ReasoningData(
        dataset=shipped_data("reasoning/train.jsonl"),
        eval_dataset=shipped_data("reasoning/test.jsonl"),
        batch_size=32,
        num_epochs=2,
        max_length=256,
    ),
    optimizer=OptimizerSettings(learning_rate=3e-3),
    eval=HeldOutEval(every=5),
    checkpoint=CheckpointSettings(save_every=0),
)
class Config(ReasoningDistillationSettings):
    pass


RECIPE = Recipe(
    name="distill_reasoning",
    description="off-policy reasoning distillation: SFT on a teacher's reasoning traces, thinking trained or masked",
    config_cls=Config,
    workflow=reasoning_distillation_workflow,
)
