"""Memory and time of an RL step as the episode grows: `rl_numerics_check` on `tiny64k`, local backend.

    PYTHONPATH=. python benchmarks/long_episode.py [--lengths 1024 4096 16384 65536] [--pages 8]

Each length runs `kitchen run rl_numerics_check` in a fresh process (peak RSS is per process): one
episode per step (group_size 1), `--pages` pages (so `--pages + 1` turns whatever the length), the
pages' words set so the episode reaches the length, `--steps` steps (2). Per length it prints the
episode's tokens, the last step's seconds in sampling (every turn re-prefills its whole prompt), in the
numerics check's trainer `forward` and in the train step (`forward_backward` + `optim_step`), the
process's peak RSS, the largest |sampling - training logprob| and, last, each figure's growth per 4x
length (the exponent of length it scales with).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TOKENS_PER_WORD = 1.72
"""Tokens per page word on tiny's tokenizer (measured on `page_count` pages)."""

STAGES = {"sample_s": "time/do_rollouts", "check_s": "time/check_logprob_agreement", "train_s": "time/rl_train_step"}


def run_length(length: int, pages: int, threads: int, steps: int, out: Path) -> dict[str, float]:
    """One fresh `kitchen run` whose episode is about `length` tokens; its figures."""
    words = max(1, round(length / pages / TOKENS_PER_WORD))
    command = [sys.executable, "-m", "kitchen", "run", "rl_numerics_check", "backend=local", "model_name=tiny64k"]
    command += [f"env.num_pages={pages}", f"env.page_words={words}", "rl.group_size=1", "rl.groups_per_batch=1"]
    command += [f"rl.num_batches={steps}", "checkpoint.save_every=0", f"log_path={out}", f"local.cpu_threads={threads}"]
    with open(out.with_suffix(".log"), "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"length {length}: kitchen run failed, see {out.with_suffix('.log')}")
    last = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][-1]
    return {
        "tokens": last["env/all/episode_tokens"],
        **{name: last[key] for name, key in STAGES.items()},
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "max_abs_diff": last["numerics/max_abs_diff"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="local.cpu_threads of each run")
    parser.add_argument("--steps", type=int, default=2, help="steps per run; the last one is reported")
    args = parser.parse_args()
    rows = []
    header = f"{'target':>7} {'tokens':>7} {'sample s':>9} {'check s':>8} {'train s':>8}"
    print(f"{header} {'peak RSS MiB':>13} {'max|diff|':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for length in args.lengths:
            row = run_length(length, args.pages, args.threads, args.steps, Path(tmp) / f"run{length}")
            rows.append(row)
            print(
                f"{length:>7} {row['tokens']:>7.0f} {row['sample_s']:>9.2f} {row['check_s']:>8.2f} "
                f"{row['train_s']:>8.2f} {row['peak_rss_mib']:>13.0f} {row['max_abs_diff']:>10.2e}",
                flush=True,
            )
    for before, after in itertools.pairwise(rows):
        ratio = after["tokens"] / before["tokens"]
        growth = ", ".join(
            f"{name} x{after[name] / before[name]:.2f} (exponent {math.log(after[name] / before[name], ratio):.2f})"
            for name in (*STAGES, "peak_rss_mib")
        )
        print(f"{before['tokens']:.0f} -> {after['tokens']:.0f} tokens: {growth}")


if __name__ == "__main__":
    main()
