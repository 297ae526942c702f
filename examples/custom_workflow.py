"""Compose your own workflow: built-in supervised stages plus one stage of your own.

    python examples/custom_workflow.py                       # embedded tiny model, local backend
    python examples/custom_workflow.py backend=noop data.max_steps=5

`DropLongExamples` filters each batch before it is trained on and logs what it dropped. Its
`run` signature is its declaration, checked when the workflow is built: rename its `batch`
parameter to `batches` and the run fails before any work starts, naming this stage and the key.
"""

from __future__ import annotations

import sys

from kitchen import Context, Loop, Recipe, RunDir, Stage, Workflow, load_config, read_metrics, run_recipe
from kitchen.families.common import (
    CloseBackend,
    CollectTrainStep,
    CreateTrainingClient,
    GetTokenizer,
    SaveCheckpoint,
    SubmitTrainStep,
)
from kitchen.families.supervised import Batch, GetSupervisedBatch, LoadSupervisedData, PromptCompletion
from recipes.sl_basic import Config
from train_core.types import Datum


# --8<-- [start:stage]
class DropLongExamples(Stage):
    """Keep only examples of at most `max_tokens` input tokens; log how many were dropped."""

    def __init__(self, max_tokens: int) -> None:
        super().__init__()
        self.max_tokens = max_tokens

    async def run(self, ctx: Context, batch: list[Datum]) -> Batch:
        kept = [datum for datum in batch if datum.model_input.length <= self.max_tokens]
        ctx.record({"filter/dropped": len(batch) - len(kept)})
        return Batch(kept or batch[:1])


# --8<-- [end:stage]


# --8<-- [start:workflow]
def build_workflow(config: Config) -> Workflow:
    return Workflow(
        name="sft_with_filter",
        steps=[
            GetTokenizer(),
            LoadSupervisedData(PromptCompletion()),
            CreateTrainingClient(),
            Loop(
                "train",
                over="num_steps",
                step=True,
                body=[
                    GetSupervisedBatch(),
                    DropLongExamples(max_tokens=24),
                    SubmitTrainStep(),
                    CollectTrainStep(keep=1),
                ],
            ),
            CollectTrainStep(keep=0, name="await_last_step"),
            SaveCheckpoint(final=True),
        ],
        finally_=[CloseBackend()],
    )


RECIPE = Recipe("sft_with_filter", "sl_basic plus a batch filter", Config, build_workflow)
# --8<-- [end:workflow]


def main(overrides: list[str]) -> RunDir:
    config = load_config(Config, None, ["data.max_steps=40", "data.eval_dataset=null", *overrides])
    run_dir = run_recipe(RECIPE, config)
    rows = read_metrics(run_dir.metrics)
    print(
        f"first NLL {rows[0]['train_mean_nll']:.3f} -> last NLL {rows[-1]['train_mean_nll']:.3f}; "
        f"dropped {sum(r['filter/dropped'] for r in rows):.0f} long examples"
    )
    return run_dir


if __name__ == "__main__":
    main(sys.argv[1:])
