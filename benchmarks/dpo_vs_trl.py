"""DPO throughput: kitchen's local backend against TRL's `DPOTrainer`, on the same problem.

    PYTHONPATH=. python benchmarks/dpo_vs_trl.py [--steps 30] [--batch-size 16] [--threads 2]
        [--model tiny|32m|50m] [--data polite_arithmetic|chat_sl] [--lean-trl] [--profile]

Both train the same model — the embedded tiny model (`load_base_model("tiny")` builds it from the
shipped config and a fixed seed) or, with `--model 32m` / `50m`, a random-weight Qwen3 model of
that size written to a scratch directory and loaded by path — on the same comparisons (`--data`):
the shipped polite_arithmetic comparisons (one-turn prompts of near-equal length, replies of
~15 tokens), or `chat_sl`: pairs made from the shipped chat_sl conversations (one to three
exchanges, some with a system message), each conversation's context as the prompt, its own last
reply as the chosen completion and the next conversation's last reply as the rejected one — the
multi-turn shape of open preference sets, whose prompts differ in length from pair to pair
(`comparison_lengths` prints the shape each run trains on). Both sides get
the same chat template (kitchen's `hf_chat_template` renderer is the tokenizer's template, which
TRL applies), batch size in pairs, max length, beta, learning rate and schedule (linear), AdamW
settings (betas 0.9/0.95, no weight decay, no clipping), float32 on the CPU with the same number
of torch threads (default 1, the local backend's default for the tiny model), one after the
other in this process, alternating `--repeats` times (each framework's best run counts: shared
machines are noisy). TRL runs with gradient checkpointing and bf16 off (its defaults) to match.

The process is pinned to `--threads` cores (`os.sched_setaffinity`), so neither side gets more
cores than its intra-op threads: kitchen computes the next step's reference logprobs on its
sampling thread while the training thread runs, which on an unpinned machine would let it use a
core TRL (one thread, strictly sequential) cannot.

`--lean-trl` adds a third contender, TRL's `DPOTrainer` with its per-step metrics cut out (a
subclass whose loss is the same sigmoid DPO loss but whose fused LM head computes only the
log-probabilities, not the entropy, mean logits and top-1 flags, and which logs nothing but the
loss): the fairest comparison, as kitchen's DPO logs only pair-level metrics.

Throughput is measured in steady state: pairs / seconds from the end of the warm-up steps to the
end of the last step, i.e. everything a step costs — batching, reference logprobs, the
forward-backward, the optimizer step and each framework's bookkeeping — but not model loading or
dataset preparation. `--max-length` must hold the longest sequence, so neither side truncates
(the benchmark says which length the data needs). TRL is a benchmark-only dependency
(`pip install .[bench]`). The last line is the ratio kitchen/TRL (goal: >= 2.0 on the 32M model).
`--device cuda --bf16 --model 0.6b` runs it on a GPU in bfloat16 and prints each side's model FLOPs
utilisation and peak memory.
"""

from __future__ import annotations

import copy
import itertools
import json
import statistics
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

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
from train_core.preference.datasets import load_comparisons
from train_core.renderers.messages import Message

POLITE_ARITHMETIC = Path(shipped_data("preference/polite_arithmetic_train.jsonl"))
RENDERER = "hf_chat_template"


@dataclass(frozen=True)
class DPOSettings(Settings):
    beta: float = 0.1
    dataset: Path = POLITE_ARITHMETIC
    """A comparisons-layout JSONL file both sides train on."""


def chat_sl_comparisons(directory: Path) -> Path:
    """Comparisons made from the shipped chat_sl conversations, written into `directory`: each
    conversation's messages before its last reply as the prompt, that reply as chosen, the next
    conversation's last reply as rejected (pairs whose two replies are equal are left out)."""
    lines = Path(shipped_data("chat_sl/train.jsonl")).read_text().splitlines()
    conversations = [json.loads(line)["messages"] for line in lines]
    path = directory / "chat_sl_comparisons.jsonl"
    with path.open("w") as out:
        for messages, following in itertools.pairwise(conversations):
            chosen, rejected = messages[-1]["content"], following[-1]["content"]
            if chosen != rejected:
                out.write(json.dumps({"prompt": messages[:-1], "chosen": chosen, "rejected": rejected}) + "\n")
    return path


def comparison_lengths(settings: DPOSettings) -> tuple[float, float, int]:
    """The data's shape under the shared chat template: mean prompt tokens, mean reply tokens
    (chosen and rejected) and the longest prompt + reply."""
    tokenizer = cast(Any, load_tokenizer(settings.model))  # an HF tokenizer (TRL is handed the same one)

    def length(messages: list[Message], generation_prompt: bool = False) -> int:
        ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt)
        return len(ids["input_ids"] if isinstance(ids, Mapping) else ids)

    prompts, replies, longest = [], [], 0
    for row in trl_rows(settings.dataset):
        prompt = length(row["prompt"], generation_prompt=True)
        prompts.append(prompt)
        for side in ("chosen", "rejected"):
            whole = length(row["prompt"] + row[side])
            replies.append(whole - prompt)
            longest = max(longest, whole)
    return statistics.mean(prompts), statistics.mean(replies), longest


def trl_rows(dataset: Path) -> list[dict[str, list[Message]]]:
    """The comparisons as TRL's conversational prompt / chosen / rejected records."""
    comparisons, _ = load_comparisons(dataset, "comparisons")
    return [
        {
            "prompt": list(c.comparison.prompt_conversation),
            "chosen": list(c.comparison.completion_A),
            "rejected": list(c.comparison.completion_B),
        }
        for c in comparisons
    ]


def run_trl(settings: DPOSettings, workdir: Path, lean: bool = False) -> Result:
    from datasets import Dataset
    from transformers import PreTrainedModel, PreTrainedTokenizerBase
    from trl import DPOConfig, DPOTrainer
    from trl.trainer.utils import add_fused_lm_head

    class LeanDPOTrainer(DPOTrainer):
        """The sigmoid DPO loss with no per-token metrics: log-probabilities only, loss logged."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            add_fused_lm_head(cast(PreTrainedModel, self.model), outputs=("log_probs",))  # not 4 per-token fields

        def _compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool) -> Any:
            completion_mask = inputs["completion_mask"]
            skip = {"completion_mask", "ref_chosen_logps", "ref_rejected_logps"}
            model_kwargs = {key: value for key, value in inputs.items() if key not in skip}
            model_kwargs["use_cache"] = False
            labels = inputs["input_ids"].masked_fill(completion_mask == 0, -100)
            seq_len = completion_mask.size(1) - 1
            logps = model(**model_kwargs, labels=labels, fused_lm_head=True).log_probs[:, -seq_len:].sum(dim=1)
            with torch.no_grad():
                ref_model = cast(Any, self.ref_model)
                ref = ref_model(**model_kwargs, labels=labels, fused_lm_head=True).log_probs[:, -seq_len:]
            chosen, rejected = (logps - ref.sum(dim=1)).chunk(2, dim=0)
            return -torch.nn.functional.logsigmoid(self.beta * (chosen - rejected)).mean()

    dataset = Dataset.from_list(trl_rows(settings.dataset))
    model = cast(PreTrainedModel, load_base_model(settings.model, model_dtype(settings)))
    config = DPOConfig(**trl_arguments(settings, str(workdir)), beta=settings.beta)
    clock = trl_step_clock()
    torch.set_num_threads(settings.threads)
    trainer = (LeanDPOTrainer if lean else DPOTrainer)(
        model=model,
        ref_model=copy.deepcopy(model),
        args=config,
        train_dataset=dataset,
        processing_class=cast(PreTrainedTokenizerBase, load_tokenizer(settings.model)),
        callbacks=[clock],
    )
    prepared = cast(Dataset, trainer.train_dataset)
    lengths = [len(row["prompt_ids"]) + len(row[side]) for row in prepared for side in ("chosen_ids", "rejected_ids")]
    name = "trl-lean" if lean else "trl"
    with op_profile(settings.profile, name):
        trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return Result(
        name,
        items_per_second(settings, clock.ends),
        losses[0],
        losses[-1],
        statistics.mean(lengths),
        cpu_items_per_second=items_per_second(settings, clock.ends, clock=1),
    )


def run_kitchen(settings: DPOSettings, workdir: Path) -> Result:
    metrics, clock = run_kitchen_recipe(
        "dpo",
        settings,
        workdir,
        "load_preference_data",
        {"data.dataset": settings.dataset, "renderer": RENDERER, "dpo.beta": settings.beta},
    )
    rows = read_metrics(metrics)
    steady = rows[settings.warmup_steps :]
    breakdown = ", ".join(
        f"{label} {1000 * statistics.mean(row[key] for row in steady):.0f} ms"
        for label, key in (
            ("reference logprobs", "time/compute_reference_logprobs"),
            ("waiting for the previous step", "time/collect_train_step"),
            ("submit latency to result", "time/step_latency"),
        )
    )
    losses = [row["dpo_loss"] for row in rows]
    return Result(
        "kitchen",
        items_per_second(settings, clock.ends),
        losses[0],
        losses[-1],
        statistics.mean(clock.lengths),
        f"per step: {breakdown}",
        cpu_items_per_second=items_per_second(settings, clock.ends, clock=1),
    )


def main() -> None:
    parser = benchmark_parser(__doc__.splitlines()[0], "pairs", "tiny")
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--lean-trl", action="store_true", help="also run TRL without its per-token metrics")
    parser.add_argument("--data", choices=("polite_arithmetic", "chat_sl"), default="polite_arithmetic")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory() as tmp:
        dataset = POLITE_ARITHMETIC if args.data == "polite_arithmetic" else chat_sl_comparisons(Path(scratch))
        settings = DPOSettings(**settings_fields(parser, args, Path(scratch)), beta=args.beta, dataset=dataset)
        print(settings)
        prompt, reply, longest = comparison_lengths(settings)
        print(f"{args.data}: prompts {prompt:.1f} tokens, replies {reply:.1f} on average, longest sequence {longest}")
        if longest > settings.max_length:
            parser.error(f"--max-length {settings.max_length} would truncate {args.data}: give at least {longest}")
        contenders = {"trl": lambda repeat: run_trl(settings, Path(tmp) / f"trl-{repeat}")}
        if args.lean_trl:
            contenders["trl-lean"] = lambda repeat: run_trl(settings, Path(tmp) / f"trl-lean-{repeat}", lean=True)
        contenders["kitchen"] = lambda repeat: run_kitchen(settings, Path(tmp) / f"kitchen-{repeat}")
        best, runs = run_alternating(contenders, args.repeats)
    print(f"model {args.model}, {args.threads} thread(s), pairs/s")
    print_mfu(
        settings,
        {name: 2 * r.items_per_second * r.tokens_per_sequence for name, r in best.items()},
        best["trl"].tokens_per_sequence,
        passes=4 / 3,  # the reference model's forward: a third of a training step's FLOPs
    )
    if args.lean_trl:
        print_ratio_spread(runs, "kitchen", "trl-lean", "none: TRL without its per-token metrics")
    print_ratio_spread(runs, "kitchen", "trl", ">= 2.0 per CPU second")


if __name__ == "__main__":
    main()
