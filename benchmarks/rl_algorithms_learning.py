"""Do the algorithm presets learn on the tiny model? `math_rl` (warm start, then RL on sums) for
each algorithm and seed, on the local backend's CPU: the sampled reward's gain over the RL steps
(mean of the last 5 steps minus mean of the first 5) and the held-out reward at the first and
last evaluation. CPU heavy (about a minute per run on an idle machine): run it alone, niced.

    PYTHONPATH=. nice python benchmarks/rl_algorithms_learning.py [--steps 40] [--seeds 0 1 2]
        [--algorithms default dapo dr_grpo]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.runs.metrics import read_metrics
from recipes.math_rl import RECIPE, Config

REWARD = "env/all/reward/total"
EVAL_REWARD = "eval/all/reward/total"


def learn(log_path: Path, algorithm: str, seed: int, steps: int) -> dict[str, float]:
    """One run's reward gain, held-out rewards and wall seconds."""
    preset = [] if algorithm == "default" else [f"algorithm.preset={algorithm}"]
    overrides = [f"log_path={log_path}", f"seed={seed}", f"rl.num_batches={steps}", "checkpoint.save_every=0", *preset]
    config = load_config(Config, None, overrides)
    started = time.perf_counter()
    rows: list[dict[str, Any]] = read_metrics(run_recipe(RECIPE, config, progress=False).metrics)
    seconds = time.perf_counter() - started
    rewards = [row[REWARD] for row in rows if REWARD in row]
    evals = [row[EVAL_REWARD] for row in rows if EVAL_REWARD in row]
    head, tail = rewards[:5], rewards[-5:]
    return {
        "gain": statistics.mean(tail) - statistics.mean(head),
        "first": statistics.mean(head),
        "last": statistics.mean(tail),
        "eval_first": evals[0],
        "eval_last": evals[-1],
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="reward gain of the algorithm presets on math_rl")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--algorithms", nargs="+", default=["default", "dapo", "dr_grpo"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for algorithm in args.algorithms:
            results = []
            for seed in args.seeds:
                result = learn(Path(tmp) / f"{algorithm}-{seed}", algorithm, seed, args.steps)
                results.append(result)
                print(
                    f"{algorithm:<12} seed {seed}: reward {result['first']:.3f} -> {result['last']:.3f} "
                    f"(gain {result['gain']:+.3f}); held-out {result['eval_first']:.3f} -> "
                    f"{result['eval_last']:.3f}; {result['seconds']:.0f} s",
                    flush=True,
                )
            gains = [r["gain"] for r in results]
            spread = statistics.stdev(gains) if len(gains) > 1 else 0.0
            print(f"{algorithm:<12} mean gain {statistics.mean(gains):+.3f} +- {spread:.3f} over seeds {args.seeds}")


if __name__ == "__main__":
    main()
