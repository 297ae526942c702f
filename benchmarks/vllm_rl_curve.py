"""Does RL learn the same with vLLM rollouts? `math_rl` on tiny32 with `local.sampler=vllm` and
with `local.sampler=kitchen`, same seeds and settings, side by side: the per-step sampled reward
of both, their difference, and the noise to judge it by.

    .venv-vllm/bin/python benchmarks/vllm_rl_curve.py [--steps 20] [--seeds 0 1] [--keep DIR]

Needs vLLM (`bash scripts/setup_vllm.sh` makes .venv-vllm); without it, it says so and exits.
Each run is the shipped math_rl (a warm start, then `--steps` RL steps of 32 groups x 8 samples),
on tiny32 (head size 32, which vLLM's CPU kernels take). The two samplers draw different samples
from the same seed, so their trajectories part after the first step: "within noise" means the
vLLM-kitchen difference of the last-5-step mean is no larger than the same sampler's spread from
seed to seed, and of the per-step difference's spread. Also printed: the held-out reward, the
largest `optim/kl_sample_train_v2` (on-policy: < 1e-3 wanted; ~1e-12 in float32), and the
seconds per step of rollouts and weight sync. CPU heavy (a few minutes per run on 2 cores).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REWARD = "env/all/reward/total"
EVAL_REWARD = "eval/all/reward/total"
KL = "optim/kl_sample_train_v2"
SAMPLERS = ("vllm", "kitchen")


@dataclass(frozen=True)
class Curve:
    """One run's figures."""

    rewards: list[float]
    evals: list[tuple[int, float]]
    max_kl: float
    rollout_s: float
    sync_s: float | None
    seconds: float

    def mean(self, part: slice) -> float:
        return statistics.mean(self.rewards[part])


def run(log_path: Path, sampler: str, seed: int, steps: int) -> Curve:
    """One math_rl run on tiny32 with `sampler`, read back from its metrics."""
    from kitchen.engine.config.loading import load_config
    from kitchen.engine.launch import run_recipe
    from kitchen.engine.runs.metrics import read_metrics
    from recipes.math_rl import RECIPE, Config

    overrides = [
        f"log_path={log_path}",
        f"seed={seed}",
        f"rl.num_batches={steps}",
        "model_name=tiny32",
        f"local.sampler={sampler}",
        "checkpoint.save_every=0",
    ]
    config = load_config(Config, None, overrides)
    started = time.perf_counter()
    rows: list[dict[str, Any]] = read_metrics(run_recipe(RECIPE, config, progress=False).metrics)
    seconds = time.perf_counter() - started
    rl_rows = [row for row in rows if REWARD in row]
    syncs = [row["time/weight_sync"] for row in rl_rows if "time/weight_sync" in row]
    return Curve(
        rewards=[row[REWARD] for row in rl_rows],
        evals=[(row.get("step", i), row[EVAL_REWARD]) for i, row in enumerate(rows) if EVAL_REWARD in row],
        max_kl=max(row[KL] for row in rl_rows if KL in row),
        rollout_s=statistics.mean(row["time/do_rollouts"] for row in rl_rows if "time/do_rollouts" in row),
        sync_s=statistics.mean(syncs) if syncs else None,
        seconds=seconds,
    )


def spread(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else float("nan")


def report(curves: dict[tuple[str, int], Curve], seeds: list[int]) -> None:
    for seed in seeds:
        vllm, kitchen = curves["vllm", seed], curves["kitchen", seed]
        print(f"\nseed {seed}: per-step sampled reward (256 samples a step)")
        print(f"  {'step':>4} {'vllm':>7} {'kitchen':>8} {'diff':>7}")
        diffs = []
        for step, (a, b) in enumerate(zip(vllm.rewards, kitchen.rewards, strict=True)):
            diffs.append(a - b)
            print(f"  {step:>4} {a:7.3f} {b:8.3f} {a - b:+7.3f}")
        print(f"  per-step difference: mean {statistics.mean(diffs):+.3f}, std {spread(diffs):.3f}")
        for name, curve in (("vllm", vllm), ("kitchen", kitchen)):
            evals = ", ".join(f"{value:.3f}" for _, value in curve.evals)
            sync = "-" if curve.sync_s is None else f"{curve.sync_s:.2f} s"
            print(
                f"  {name:<8} first 5 {curve.mean(slice(0, 5)):.3f}, last 5 {curve.mean(slice(-5, None)):.3f}; "
                f"held-out {evals}; max kl_sample_train_v2 {curve.max_kl:.1e}; rollouts {curve.rollout_s:.2f} s/step, "
                f"weight sync {sync}/step; run {curve.seconds:.0f} s"
            )
    last = {name: [curves[name, seed].mean(slice(-5, None)) for seed in seeds] for name in SAMPLERS}
    gap = statistics.mean(last["vllm"]) - statistics.mean(last["kitchen"])
    noise = max(spread(last["vllm"]), spread(last["kitchen"]))
    verdict = (
        "no second seed to judge the noise by"
        if len(seeds) < 2
        else ("within noise" if abs(gap) <= noise else "NOT within noise")
    )
    print(
        f"\nlast-5 mean over seeds {seeds}: vllm {statistics.mean(last['vllm']):.3f} (seed std "
        f"{spread(last['vllm']):.3f}), kitchen {statistics.mean(last['kitchen']):.3f} (seed std "
        f"{spread(last['kitchen']):.3f}); vllm - kitchen {gap:+.3f}: {verdict} (|gap| <= the larger seed std)"
    )
    worst_kl = max(curves["vllm", seed].max_kl for seed in seeds)
    print(f"vllm max kl_sample_train_v2 {worst_kl:.1e} ({'< 1e-3' if worst_kl < 1e-3 else 'NOT < 1e-3'})")


def main() -> None:
    parser = argparse.ArgumentParser(description="math_rl reward curves, vLLM rollouts against kitchen's sampler")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--keep", type=Path, help="keep the run directories here (default: a temporary one)")
    args = parser.parse_args()
    if importlib.util.find_spec("vllm") is None:
        print("vLLM is not installed here: run it with .venv-vllm/bin/python (bash scripts/setup_vllm.sh makes it)")
        return
    print(f"math_rl tiny32, {args.steps} steps, seeds {args.seeds}; {os.cpu_count()} cores, load {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        curves = {}
        for seed in args.seeds:
            for sampler in SAMPLERS:
                curves[sampler, seed] = run(root / f"{sampler}-{seed}", sampler, seed, args.steps)
                print(f"{sampler} seed {seed}: {curves[sampler, seed].seconds:.0f} s", flush=True)
        report(curves, args.seeds)
    print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
