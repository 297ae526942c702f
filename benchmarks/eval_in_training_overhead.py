"""What evaluation during training costs the step loop: supervised training (`sl_basic`) on the
noop backend with simulated latency, with no eval, with a background eval (`eval.tasks`, the
default: the step loop goes on while it samples) and with a waiting one (`background: false`,
which shows how long one evaluation takes, in step times).

The latencies make one evaluation take several step times (the issue asks at least three):
`forward_backward` + `optim_step` is a step; the eval is `arithmetic` with `--limit` items,
`--eval-concurrency` in flight, each a `sample` call. The step loop is timed from the first
step's end to the last's (setup, the first step and the wait for the last eval after the loop
are outside it). Runs alternate between the three settings; medians of `--repeats` count, with
min-max. The grader's math-verify is imported before the runs: a process pays that once, on the
event loop, in its first evaluation (its time is printed apart). The last line is the background
eval's slowdown of the step loop (goal: <= 10%).

    PYTHONPATH=. python benchmarks/eval_in_training_overhead.py [--steps 60] [--every 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from kitchen.engine.config.loading import load_config
from kitchen.engine.context import Context
from kitchen.engine.hooks import Hooks
from kitchen.engine.launch import run_recipe
from kitchen.engine.recipe import get_recipe

SETTINGS = ("none", "background", "waiting")


class LoopClock(Hooks):
    """Wall time from the first step's end to the last's."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_step_end(self, ctx: Context, step: int) -> None:
        self.ends.append(time.perf_counter())

    def seconds_per_step(self) -> float:
        return (self.ends[-1] - self.ends[0]) / (len(self.ends) - 1)


def step_time(setting: str, args: argparse.Namespace, scratch: Path) -> float:
    """Seconds per step of one run of `sl_basic` with the eval `setting`."""
    latency = {"forward_backward": args.step_latency * 0.8, "optim_step": args.step_latency * 0.2}
    latency["sample"] = args.sample_latency
    overrides = [
        "backend=noop",
        f"log_path={scratch / setting}",
        f"data.max_steps={args.steps}",
        "data.batch_size=8",
        "eval.every=0",  # no held-out NLL: the eval task is what is measured
        "checkpoint.save_every=0",
        f"noop.latency={latency}",
    ]
    if setting != "none":
        background = "true" if setting == "background" else "false"
        overrides.append(
            f"eval.tasks=[{{task: arithmetic, every: {args.every}, limit: {args.limit}, background: {background}, "
            f"settings: {{concurrency: {args.eval_concurrency}}}}}]"
        )
    recipe = get_recipe("sl_basic")
    config = load_config(recipe.config_cls, None, overrides)
    clock = LoopClock()
    run_recipe(recipe, config, hooks=[clock], progress=False)
    return clock.seconds_per_step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=10, help="steps between evaluations")
    parser.add_argument("--limit", type=int, default=8, help="items per evaluation")
    parser.add_argument("--eval-concurrency", type=int, default=2, help="items in flight during an evaluation")
    parser.add_argument("--step-latency", type=float, default=0.05, help="seconds of one step's backend calls")
    parser.add_argument("--sample-latency", type=float, default=0.1, help="seconds of one sample call")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    started = time.perf_counter()
    import math_verify  # noqa: F401  # the arithmetic grader's, imported on first use

    first_use = time.perf_counter() - started
    seconds: dict[str, list[float]] = {setting: [] for setting in SETTINGS}
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(args.repeats):
            for setting in SETTINGS:
                seconds[setting].append(step_time(setting, args, Path(folder) / f"r{repeat}"))
    median = {setting: statistics.median(values) for setting, values in seconds.items()}
    print(
        f"sl_basic on noop, {args.steps} steps, an eval every {args.every} ({args.limit} items, "
        f"{args.eval_concurrency} in flight, {args.sample_latency:g} s a sample), {args.repeats} repeats"
    )
    for setting in SETTINGS:
        low, high = min(seconds[setting]), max(seconds[setting])
        print(f"  {setting:<10} {median[setting] * 1e3:7.1f} ms/step  (min {low * 1e3:.1f}, max {high * 1e3:.1f})")
    evals = len(range(args.every - 1, args.steps, args.every))  # evaluations inside the timed loop
    one_eval = (median["waiting"] - median["none"]) * (args.steps - 1) / max(evals, 1)
    print(f"one evaluation: {one_eval:.3f} s = {one_eval / median['none']:.1f} step times (waiting - none)")
    print(
        f"not in these figures: a process's first evaluation imports math-verify ({first_use:.2f} s here) on the "
        "event loop, once"
    )
    overhead = median["background"] / median["none"] - 1
    print(f"background eval slows the step loop by {overhead * 100:+.1f}% (goal: <= 10%)")


if __name__ == "__main__":
    main()
