"""Peak RSS of an SFT run against the size of its JSONL file: records stream from the file's Arrow
cache (kitchen.jsonl_cache) and datums are built per batch, so the peak should not grow with the
file. Goal: a 1 GB file trains with under 2 GB peak RSS.

    PYTHONPATH=. python benchmarks/sft_streaming_rss.py [--sizes-mb 10 100 1000] [--steps 2]

For each size it writes a prompt/completion JSONL of about that size (once, under --dir), then runs
`kitchen run sl_basic backend=noop max_steps=--steps` on it in a fresh process and prints that
process's peak RSS (`ru_maxrss`) and wall time. The first run of a file includes its conversion
into the cache; --warm runs each file twice and reports the second. Every record is tokenized
once up front (to count and skip records with nothing to train on), so a 1 GB file takes a long
time on a few cores: measure smaller sizes first.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import resource, sys
from kitchen.cli import main
code = main(["run", "sl_basic", "backend=noop", f"max_steps={sys.argv[3]}", "eval_every=0", "save_every=0",
             "overwrite=true", f"dataset={sys.argv[1]}", f"log_path={sys.argv[2]}"])
print("PEAK_RSS_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, code)
"""


def write_file(path: Path, megabytes: int) -> Path:
    if path.is_file():
        return path
    record = {"prompt": "What is the capital of France? " * 8, "completion": " The capital of France is Paris." * 16}
    line = json.dumps(record) + "\n"
    with path.open("w") as handle:
        for _ in range(megabytes * (1 << 20) // len(line) + 1):
            handle.write(line)
    return path


def run(path: Path, steps: int, scratch: Path) -> tuple[float, float]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(scratch / f"run-{path.stem}"), str(steps)],
        capture_output=True,
        text=True,
        check=False,
    )
    line = next((text for text in done.stdout.splitlines() if text.startswith("PEAK_RSS_KB")), None)
    if line is None or not line.endswith(" 0"):
        raise SystemExit(f"run on {path} failed:\n{done.stderr[-2000:]}")
    return int(line.split()[1]) / 1024, time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "kitchen-sft-streaming")
    parser.add_argument("--warm", action="store_true", help="report a second run (the cache already built)")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    print(f"{'file MB':>8} {'peak RSS MB':>12} {'wall s':>8}")
    for size in args.sizes_mb:
        path = write_file(args.dir / f"sft-{size}mb.jsonl", size)
        peak, wall = run(path, args.steps, args.dir)
        if args.warm:
            peak, wall = run(path, args.steps, args.dir)
        print(f"{path.stat().st_size / 2**20:8.0f} {peak:12.0f} {wall:8.1f}", flush=True)
    print("goal: a 1 GB file under 2048 MB peak RSS")


if __name__ == "__main__":
    main()
