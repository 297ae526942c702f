"""What the kitchen-vs-TRL benchmarks share: the matched TRL training arguments, step clocks on
both sides, steady-state throughput, and the alternating best-of-repeats report."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks._models import peak_bf16_tflops, training_flops_per_token
from kitchen.engine.context import Context
from kitchen.engine.hooks import Hooks
from kitchen.engine.stage import Stage


@dataclass(frozen=True)
class Settings:
    steps: int
    warmup_steps: int
    batch_size: int
    max_length: int
    learning_rate: float
    seed: int
    threads: int
    model: str
    profile: bool
    device: str = "cpu"
    bf16: bool = False
    """Both sides train bfloat16 weights (no autocast, no float32 master copy), else float32."""


def benchmark_parser(description: str, items: str, default_model: str) -> argparse.ArgumentParser:
    """The options every kitchen-vs-TRL benchmark takes (`items`: what a batch counts)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup-steps", type=int, default=3, help="steps left out of the timing")
    parser.add_argument("--batch-size", type=int, default=16, help=f"{items} per step")
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, for both")
    parser.add_argument("--repeats", type=int, default=2, help="alternate TRL and kitchen runs; keep each's best")
    parser.add_argument("--model", choices=("tiny", "32m", "50m", "0.6b"), default=default_model)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--bf16", action="store_true", help="both sides train bfloat16 weights")
    parser.add_argument("--no-pin", action="store_true", help="do not pin the process to --threads cores")
    parser.add_argument("--profile", action="store_true", help="print each run's top torch ops by self CPU time")
    return parser


def settings_fields(parser: argparse.ArgumentParser, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """`Settings`' fields from `benchmark_parser`'s options (the model built under `scratch`), after
    checking them and pinning the process to `--threads` cores."""
    from benchmarks._models import model_name

    if not 1 <= args.warmup_steps < args.steps:
        parser.error("need 1 <= --warmup-steps < --steps")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(f"{parser.prog} --device cuda needs a CUDA GPU; none here (nothing measured)")
            raise SystemExit(0)
        print(f"GPU: {torch.cuda.get_device_name()}")
    if not args.no_pin:
        pin_cores(args.threads)
    return {
        "steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "learning_rate": args.learning_rate,
        "seed": args.seed,
        "threads": args.threads,
        "model": model_name(args.model, scratch),
        "profile": args.profile,
        "device": args.device,
        "bf16": args.bf16,
    }


@dataclass(frozen=True)
class Result:
    name: str
    items_per_second: float
    first_loss: float
    last_loss: float
    tokens_per_sequence: float
    breakdown: str = ""
    cpu_items_per_second: float = 0.0
    """Items per second of process CPU time."""
    peak_mib: float | None = None
    """Peak CUDA memory allocated during the run (None on the CPU)."""


StepEnd = tuple[float, float]
"""When a step ended: (wall clock, process CPU time of every thread)."""


def step_end() -> StepEnd:
    return time.perf_counter(), time.process_time()


def items_per_second(settings: Settings, step_ends: list[StepEnd], clock: int = 0) -> float:
    """Batch items (pairs, sequences) of the steps after warm-up, over the time from the end of
    warm-up to the last step's end: wall-clock time (`clock` 0), or the process's CPU time (1:
    steadier on a loaded machine, and fair when the process is pinned to its thread count)."""
    timed = step_ends[settings.warmup_steps - 1 :]
    return (len(timed) - 1) * settings.batch_size / (timed[-1][clock] - timed[0][clock])


def model_dtype(settings: Settings) -> Any:
    """The dtype both sides hold the weights in."""
    import torch

    return torch.bfloat16 if settings.bf16 else torch.float32


def trl_arguments(settings: Settings, output_dir: str) -> dict[str, Any]:
    """TRL config fields matching kitchen's defaults: AdamW betas 0.9/0.95, no weight decay, no
    clipping, linear schedule without warm-up, the benchmark's device and dtype, no checkpointing
    or saving."""
    return {
        "output_dir": output_dir,
        "per_device_train_batch_size": settings.batch_size,
        "max_steps": settings.steps,
        "learning_rate": settings.learning_rate,
        "lr_scheduler_type": "linear",
        "warmup_steps": 0,
        "adam_beta1": 0.9,
        "adam_beta2": 0.95,
        "adam_epsilon": 1e-8,
        "weight_decay": 0.0,
        "max_grad_norm": 0.0,
        "max_length": settings.max_length,
        "bf16": False,  # the model itself is loaded in `model_dtype(settings)`: no autocast on either side
        "gradient_checkpointing": False,
        "use_cpu": settings.device == "cpu",
        "seed": settings.seed,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }


def trl_step_clock() -> Any:
    """A `TrainerCallback` whose `ends` are the times each TRL step ended."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[StepEnd] = []

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.ends.append(step_end())

    return StepClock()


class KitchenStepClock(Hooks):
    """The time each kitchen step ends, and the tokens of each training sequence. Steps are
    pipelined (step i is collected while step i+1 is submitted), so the run's last step ends when
    `await_last_step` has collected it."""

    def __init__(self, data_stage: str) -> None:
        self.data_stage = data_stage
        self.ends: list[StepEnd] = []
        self.lengths: list[int] = []

    def on_step_end(self, ctx: Context, step: int) -> None:
        if step > 0:
            self.ends.append(step_end())  # step-1 is done; step is in flight

    def after_stage(self, ctx: Context, stage: Stage, seconds: float) -> None:
        if stage.name == "await_last_step":
            self.ends.append(step_end())
        if stage.name == self.data_stage:
            self.lengths = [datum.model_input.length + 1 for datum in ctx.state["train_data"]]


@contextmanager
def op_profile(enabled: bool, title: str) -> Iterator[None]:
    """When `enabled`, print the top torch ops by self CPU time of what runs inside (every thread:
    kitchen trains on a worker thread and scores on a sampling thread)."""
    if not enabled:
        yield
        return
    from torch._C._profiler import _ExperimentalConfig
    from torch.profiler import ProfilerActivity, profile

    every_thread = _ExperimentalConfig(profile_all_threads=True)
    with profile(activities=[ProfilerActivity.CPU], experimental_config=every_thread) as prof:
        yield
    print(f"-- {title}: top torch ops by self CPU time")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=40))


def pin_cores(threads: int) -> None:
    """Pin this process to `threads` cores, so neither side gets more cores than its intra-op
    threads (kitchen overlaps some work on a second thread, which TRL cannot)."""
    cores = sorted(os.sched_getaffinity(0))[:threads]
    os.sched_setaffinity(0, cores)
    print(f"pinned to cores {cores}")


def run_alternating(
    contenders: dict[str, Callable[[int], Result]], repeats: int
) -> tuple[dict[str, Result], dict[str, list[Result]]]:
    """Run each contender once per repeat, in turn; print every run's figure. Each one's best run
    (shared machines are noisy), and every run in order (for `print_ratio_spread`)."""
    import torch

    runs: dict[str, list[Result]] = {name: [] for name in contenders}
    for repeat in range(repeats):
        for name, run in contenders.items():
            if not torch.cuda.is_available():
                runs[name].append(run(repeat))
            else:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                result = run(repeat)
                runs[name].append(replace(result, peak_mib=torch.cuda.max_memory_allocated() / 2**20))
            done = runs[name][-1]
            print(
                f"run {repeat + 1}/{repeats} {name}: {done.items_per_second:.2f}/s wall, "
                f"{done.cpu_items_per_second:.2f}/s per CPU second (load average {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    best = {name: max(results, key=lambda r: r.items_per_second) for name, results in runs.items()}
    best_cpu = {name: max(r.cpu_items_per_second for r in results) for name, results in runs.items()}
    best = {name: replace(result, cpu_items_per_second=best_cpu[name]) for name, result in best.items()}
    print(f"load average {os.getloadavg()[0]:.1f}")
    for result in best.values():
        every = ", ".join(f"{r.items_per_second:.2f}" for r in runs[result.name])
        cpu = ", ".join(f"{r.cpu_items_per_second:.2f}" for r in runs[result.name])
        print(
            f"{result.name:>9}: {result.items_per_second:8.2f}/s (runs: {every}; per CPU second: {cpu})   loss "
            f"{result.first_loss:.4f} -> {result.last_loss:.4f}   {result.tokens_per_sequence:.1f} tokens/sequence"
        )
        if result.peak_mib is not None:
            print(f"{'':>11}peak CUDA memory {result.peak_mib:.0f} MiB")
        if result.breakdown:
            print(f"{'':>11}{result.breakdown}")
    return best, runs


def print_ratio_spread(
    runs: dict[str, list[Result]], numerator: str, denominator: str, goal: str, by_tokens: bool = False
) -> None:
    """The ratio of the two contenders' throughput (items per second, or with `by_tokens` tokens per
    second: items x each side's tokens per item) run by run, the runs of one repeat paired (they ran
    side by side): median, min and max over the repeats, per process CPU second (the figure that
    counts on a shared machine) and wall clock."""

    def ratios(rate: Callable[[Result], float]) -> list[float]:
        pairs = zip(runs[numerator], runs[denominator], strict=True)
        return [
            rate(a) / rate(b) * (a.tokens_per_sequence / b.tokens_per_sequence if by_tokens else 1.0) for a, b in pairs
        ]

    clocks: list[tuple[str, Callable[[Result], float]]] = [
        ("per CPU second", lambda r: r.cpu_items_per_second),
        ("wall clock", lambda r: r.items_per_second),
    ]
    for label, rate in clocks:
        values = ratios(rate)
        print(
            f"ratio {numerator}/{denominator} {label}: median {statistics.median(values):.2f}, "
            f"min {min(values):.2f}, max {max(values):.2f} over {len(values)} paired repeats "
            f"({', '.join(f'{v:.2f}' for v in values)}; load average {os.getloadavg()[0]:.1f}) (goal: {goal})"
        )


def run_kitchen_recipe(
    recipe_name: str, settings: Settings, workdir: Path, data_stage: str, overrides: dict[str, object] | None = None
) -> tuple[Path, KitchenStepClock]:
    """A kitchen run of `recipe_name` on the local cpu backend with the benchmark's shared settings
    (plus the recipe's own `overrides`, dotted config keys): its metrics file and its step clock, started at the end
    of `data_stage`."""
    from kitchen.engine.config.loading import load_config
    from kitchen.engine.launch import run_recipe
    from kitchen.engine.recipe import get_recipe

    recipe = get_recipe(recipe_name)
    shared = {
        "backend": "local",
        "model_name": settings.model,
        "local.device": settings.device,
        "local.dtype": "bfloat16" if settings.bf16 else "float32",
        "data.eval_dataset": "null",
        "data.batch_size": settings.batch_size,
        "data.max_steps": settings.steps,
        "data.num_epochs": settings.steps,  # enough epochs for max_steps
        "data.max_length": settings.max_length,
        "optimizer.learning_rate": settings.learning_rate,
        "optimizer.lr_schedule": "linear",
        "checkpoint.save_every": 0,
        "eval.every": 0,
        "seed": settings.seed,
        "local.cpu_threads": settings.threads,
        "log_path": str(workdir),
    }
    config = load_config(recipe.config_cls, None, [f"{k}={v}" for k, v in {**shared, **(overrides or {})}.items()])
    clock = KitchenStepClock(data_stage)
    with op_profile(settings.profile, "kitchen"):
        run_dir = run_recipe(recipe, config, hooks=[clock], progress=False)
    return run_dir.metrics, clock


def print_mfu(settings: Settings, tokens_per_second: dict[str, float], context: float, passes: float = 1.0) -> None:
    """Each contender's model FLOPs utilisation on this GPU (`passes`: training-token equivalents
    per token, e.g. 4/3 for DPO, whose reference forward is a third of a training step)."""
    import torch

    if settings.device != "cuda":
        return
    card = torch.cuda.get_device_name()
    peak = peak_bf16_tflops(card)
    flops = training_flops_per_token(settings.model, context) * passes
    for name, rate in tokens_per_second.items():
        achieved = rate * flops / 1e12
        share = f"MFU {100 * achieved / peak:.1f}% of {peak:.0f}" if peak else "MFU unknown (no peak on file)"
        print(f"{card}: {name} {rate:.0f} tokens/s = {achieved:.1f} TFLOP/s, {share} bf16 TFLOP/s")
