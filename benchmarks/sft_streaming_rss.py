"""Peak RSS of an SFT run against the size of its JSONL file: records stream from the file's Arrow
cache (kitchen.engine.runs.record_cache) and datums are built per batch, so the peak should not grow with the
file. Goal: a 1 GB file trains with under 2 GB peak RSS.

    PYTHONPATH=. python benchmarks/sft_streaming_rss.py [--sizes-mb 10 100 1000] [--steps 2]
        [--stop-after-records N] [--keep-files]

For each size it writes a prompt/completion JSONL of about that size (under --dir, deleted at the
end unless --keep-files), then runs `kitchen run sl_basic backend=noop data.max_steps=--steps` on it in
a fresh process and prints that process's peak RSS (`ru_maxrss`) and wall time. The first run of a
file includes its conversion into the cache; --warm runs each file twice and reports the second.

Loading reads the whole file three times before the first step: the conversion into the cache
(every line parsed), a check of every record's keys, and a tokenization of every record (to count
and skip records with nothing to train on). The last takes about a millisecond of CPU per record,
so a 1 GB file (1.3 million records) takes hours on a few busy cores. --stop-after-records N stops
the run once N records have been tokenized, and reports the peak RSS up to then: by that point the
whole file has been converted and read back through the cache, and the tokenization pass holds
one batch of records at a time, so what is left to grow with the file is the list of kept record
positions (8 bytes each) and nothing else until the steps, whose memory is one batch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kitchen.engine.runs.record_cache import CACHE_ENV

CHILD = """
import os, resource, sys, threading, time
import kitchen.families.supervised.stages as stages
from kitchen.apps.cli import main

built, stop_after = [0], int(sys.argv[4])
tokenize = stages._datum


def counted(*args):  # counts the records tokenized (the loading pass, then the steps' datums)
    built[0] += 1
    return tokenize(*args)


def stop_when_enough():
    while built[0] < stop_after:
        time.sleep(0.2)
    print("PEAK_RSS_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "stopped", built[0], flush=True)
    os._exit(0)


stages._datum = counted
if stop_after:
    threading.Thread(target=stop_when_enough, daemon=True).start()
code = main(["run", "sl_basic", "backend=noop", f"data.max_steps={sys.argv[3]}", "eval.every=0",
             "checkpoint.save_every=0", "overwrite=true", f"data.dataset={sys.argv[1]}", f"log_path={sys.argv[2]}"])
print("PEAK_RSS_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, code)
"""


def write_file(path: Path, megabytes: int) -> Path:
    record = {"prompt": "What is the capital of France? " * 8, "completion": " The capital of France is Paris." * 16}
    line = json.dumps(record) + "\n"
    with path.open("w") as handle:
        for _ in range(megabytes * (1 << 20) // len(line) + 1):
            handle.write(line)
    return path


def run(path: Path, steps: int, scratch: Path, stop_after: int) -> tuple[float, float, str]:
    """(peak RSS in MB, wall seconds, how the run ended) of a fresh process training on `path`."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(scratch / f"run-{path.stem}"), str(steps), str(stop_after)],
        capture_output=True,
        text=True,
        check=False,
    )
    line = next((text for text in done.stdout.splitlines() if text.startswith("PEAK_RSS_KB")), None)
    if line is None or not (line.endswith(" 0") or " stopped " in line):
        raise SystemExit(f"run on {path} failed:\n{done.stderr[-2000:]}")
    fields = line.split()
    ended = f"stopped after {fields[3]} records tokenized" if fields[2] == "stopped" else f"{steps} steps"
    return int(fields[1]) / 1024, time.monotonic() - start, ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "kitchen-sft-streaming")
    parser.add_argument("--warm", action="store_true", help="report a second run (the cache already built)")
    parser.add_argument("--stop-after-records", type=int, default=0, help="stop once N records are tokenized")
    parser.add_argument("--keep-files", action="store_true", help="keep the data files and the run's cache")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    created = []  # what this run wrote: removed at the end unless --keep-files
    if CACHE_ENV not in os.environ:
        os.environ[CACHE_ENV] = str(args.dir / "cache")
        created.append(args.dir / "cache")
    print(f"{'file MB':>8} {'peak RSS MB':>12} {'wall s':>8}  ended")
    try:
        for size in args.sizes_mb:
            path = args.dir / f"sft-{size}mb.jsonl"
            if not path.exists():
                created.append(write_file(path, size))
            created.append(args.dir / f"run-{path.stem}")
            peak, wall, ended = run(path, args.steps, args.dir, args.stop_after_records)
            if args.warm:
                peak, wall, ended = run(path, args.steps, args.dir, args.stop_after_records)
            print(f"{path.stat().st_size / 2**20:8.0f} {peak:12.0f} {wall:8.1f}  {ended}", flush=True)
    finally:
        for made in [] if args.keep_files else created:
            shutil.rmtree(made, ignore_errors=True) if made.is_dir() else made.unlink(missing_ok=True)
    print("goal: a 1 GB file under 2048 MB peak RSS")


if __name__ == "__main__":
    main()
