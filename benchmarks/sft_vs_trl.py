"""Supervised fine-tuning throughput: kitchen's local backend against TRL's `SFTTrainer`.

    PYTHONPATH=. python benchmarks/sft_vs_trl.py [--steps 30] [--batch-size 16] [--threads 1]
        [--model tiny|32m|50m] [--repeats 2]

Both train the same model (the embedded tiny model, or a random-weight Qwen3 model of ~32M /
~50M parameters built by `benchmarks/_models.py`) on the shipped sl_basic prompt/completion
records, each tokenized as prompt + completion + EOS with loss on the completion and EOS only
(kitchen's sl_basic; TRL's prompt-completion format with `completion_only_loss`), with the same
batch size, max length, learning rate and schedule (linear), AdamW settings (betas 0.9/0.95, no
weight decay, no clipping), float32 on the CPU with the same number of torch threads, the process
pinned to that many cores, alternating `--repeats` times (each framework's best run counts).

Throughput is steady-state tokens/s: sequences of the steps after warm-up over the time from
the end of warm-up to the last step's end, times each side's mean tokens per sequence. TRL is a
benchmark-only dependency (`pip install .[bench]`). The last line is the ratio kitchen/TRL
(goal: >= 1.5 on the 32M model). `--device cuda --bf16 --model 0.6b` runs it on a GPU in bfloat16
(both sides hold bfloat16 weights) and prints each side's model FLOPs utilisation and peak memory.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path
from typing import cast

import torch

from adapters.common.tokenizer import load_tokenizer
from adapters.local.model_loading import load_base_model
from benchmarks._trl import (
    Result,
    Settings,
    benchmark_parser,
    items_per_second,
    model_dtype,
    op_profile,
    print_mfu,
    print_ratio_spread,
    run_alternating,
    run_kitchen_recipe,
    settings_fields,
    trl_arguments,
    trl_step_clock,
)
from kitchen.engine.runs.metrics import read_metrics
from recipes.data import shipped_data

DATASET = shipped_data("sl_basic/train.jsonl")
LOSS_KEY = "train_mean_nll"


def run_trl(settings: Settings, workdir: Path) -> Result:
    from datasets import Dataset
    from transformers import PreTrainedModel, PreTrainedTokenizerBase
    from trl import SFTConfig, SFTTrainer

    records = [json.loads(line) for line in Path(DATASET).read_text().splitlines() if line.strip()]
    dataset = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in records])
    model = cast(PreTrainedModel, load_base_model(settings.model, model_dtype(settings)))
    config = SFTConfig(**trl_arguments(settings, str(workdir)), completion_only_loss=True, packing=False)
    clock = trl_step_clock()
    torch.set_num_threads(settings.threads)
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=cast(PreTrainedTokenizerBase, load_tokenizer(settings.model)),
        callbacks=[clock],
    )
    lengths = [len(row["input_ids"]) for row in cast(Dataset, trainer.train_dataset)]
    with op_profile(settings.profile, "trl"):
        trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return Result(
        "trl",
        items_per_second(settings, clock.ends),
        losses[0],
        losses[-1],
        statistics.mean(lengths),
        cpu_items_per_second=items_per_second(settings, clock.ends, clock=1),
    )


def run_kitchen(settings: Settings, workdir: Path) -> Result:
    metrics, clock = run_kitchen_recipe(
        "sl_basic", settings, workdir, "load_supervised_data", {"data.dataset": DATASET}
    )
    losses = [row[LOSS_KEY] for row in read_metrics(metrics) if LOSS_KEY in row]
    return Result(
        "kitchen",
        items_per_second(settings, clock.ends),
        losses[0],
        losses[-1],
        statistics.mean(clock.lengths),
        cpu_items_per_second=items_per_second(settings, clock.ends, clock=1),
    )


def main() -> None:
    parser = benchmark_parser(__doc__.splitlines()[0], "sequences", "32m")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory() as tmp:
        settings = Settings(**settings_fields(parser, args, Path(scratch)))
        print(settings)
        best, runs = run_alternating(
            {
                "trl": lambda repeat: run_trl(settings, Path(tmp) / f"trl-{repeat}"),
                "kitchen": lambda repeat: run_kitchen(settings, Path(tmp) / f"kitchen-{repeat}"),
            },
            args.repeats,
        )
    tokens_per_second = {name: r.items_per_second * r.tokens_per_sequence for name, r in best.items()}
    print(
        f"model {args.model}, {args.threads} thread(s); steady-state tokens/s: "
        + ", ".join(f"{name} {value:.0f}" for name, value in tokens_per_second.items())
    )
    print_mfu(settings, tokens_per_second, best["trl"].tokens_per_sequence)
    print_ratio_spread(runs, "kitchen", "trl", ">= 1.5 per CPU second", by_tokens=True)


if __name__ == "__main__":
    main()
