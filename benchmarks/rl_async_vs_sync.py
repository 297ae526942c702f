"""Async off-policy vs sync RL wall time, on the noop backend with simulated latency.

Sampling a step's groups and training on them get about the same latency, so a sync step costs
their sum while async mode (sampling workers running during the update) costs about the larger
of the two: at `max_steps_off_policy=1` the ratio should be near 0.5 (expected <= 0.65); the
client's own CPU work per step (noop pseudo-logprobs, datum assembly) does not overlap and
pulls it up, more so at small latencies. The task is the synthetic parity env, whose groups
always have mixed rewards, so every step trains.

    PYTHONPATH=. python benchmarks/rl_async_vs_sync.py [--steps 20] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from kitchen.config import load_config
from kitchen.context import Context
from kitchen.hooks import Hooks
from kitchen.launch import run_recipe
from kitchen.metrics import read_metrics
from kitchen.recipe import Recipe
from kitchen.rl.settings import RLSettings
from kitchen.rl.workflow import rl_workflow_for
from kitchen.stage import Stage
from recipes.envs.parity import ParityDataset, parity_task
from train_core.renderers.base import Renderer
from train_core.rl.task import RLTask


def build_task(config: RLSettings, renderer: Renderer) -> RLTask:
    dataset = ParityDataset(
        renderer, config.num_batches, config.groups_per_batch, config.group_size, 1, 0.01, config.seed
    )
    return parity_task(dataset)


BENCH_RECIPE = Recipe("rl_benchmark", "parity env on noop", RLSettings, rl_workflow_for(build_task))


class LoopClock(Hooks):
    """Wall time of the RL steps alone: from the initial sampler (setup done) to the last step's end."""

    def __init__(self) -> None:
        self.started = self.ended = 0.0

    def after_stage(self, ctx: Context, stage: Stage, seconds: float) -> None:
        if stage.name == "initial_sampler":
            self.started = time.perf_counter()

    def on_step_end(self, ctx: Context, step: int) -> None:
        self.ended = time.perf_counter()


def timed_run(log_path: Path, steps: int, latency: float, extra: list[str]) -> tuple[float, float, int]:
    """Wall seconds of one run and of its RL steps, and how many of its steps trained."""
    overrides = [
        "backend=noop",
        f"log_path={log_path}",
        f"num_batches={steps}",
        "groups_per_batch=16",
        "group_size=8",
        "max_tokens=8",
        "eval_every=0",
        "save_every=0",
        "transcript_groups=0",
        f"noop.latency.sample={latency}",
        f"noop.latency.forward_backward={0.8 * latency}",
        f"noop.latency.optim_step={0.2 * latency}",
        *extra,
    ]
    config = load_config(RLSettings, None, overrides)
    clock = LoopClock()
    started = time.perf_counter()
    run_dir = run_recipe(BENCH_RECIPE, config, hooks=[clock], progress=False)
    seconds = time.perf_counter() - started
    trained = sum(1 for row in read_metrics(run_dir.metrics) if "optim/kl_sample_train_v2" in row)
    return seconds, clock.ended - clock.started, trained


def main() -> None:
    parser = argparse.ArgumentParser(description="async vs sync RL wall time on the noop backend")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds of sampling (and of training) per step")
    parser.add_argument("--max-steps-off-policy", type=int, default=1)
    args = parser.parse_args()
    async_extra = [f"async_config.max_steps_off_policy={args.max_steps_off_policy}"]
    with tempfile.TemporaryDirectory() as tmp:
        timed_run(Path(tmp) / "warm_up", 1, 0.0, [])  # load the tokenizer and imports outside the timings
        sync_total, sync_loop, sync_trained = timed_run(Path(tmp) / "sync", args.steps, args.latency, [])
        async_total, async_loop, async_trained = timed_run(Path(tmp) / "async", args.steps, args.latency, async_extra)
    print(f"{args.steps} steps; simulated per step: sampling {args.latency:.3f} s, training {args.latency:.3f} s")
    print(f"sync : RL steps {sync_loop:6.2f} s, whole run {sync_total:6.2f} s wall ({sync_trained} steps trained)")
    print(f"async: RL steps {async_loop:6.2f} s, whole run {async_total:6.2f} s wall ({async_trained} steps trained)")
    print(f"async/sync: RL steps {async_loop / sync_loop:.3f}, whole run {async_total / sync_total:.3f}")


if __name__ == "__main__":
    main()
