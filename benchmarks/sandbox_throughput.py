"""Sandbox runs per second for a trivial program: bubblewrap vs the process sandbox, at
concurrency 1 and 8. The last line is bubblewrap's rate over the process sandbox's at 8.

Run from the repository root: `PYTHONPATH=. python benchmarks/sandbox_throughput.py [runs]`.
"""

from __future__ import annotations

import asyncio
import sys
import time
import warnings

from sandbox import Program, Sandbox, bubblewrap_unavailable_reason
from sandbox.bubblewrap import BubblewrapSandbox
from sandbox.process import ProcessSandbox

PROGRAM = Program("print(1 + 1)")


async def rate(sandbox: Sandbox, runs: int) -> float:
    start = time.perf_counter()
    results = await asyncio.gather(*(sandbox.run(PROGRAM, 10.0) for _ in range(runs)))
    elapsed = time.perf_counter() - start
    bad = [r for r in results if r.status != "ok"]
    if bad:
        raise RuntimeError(f"{len(bad)} runs failed, e.g. {bad[0]}")
    return runs / elapsed


def main(runs: int) -> None:
    warnings.simplefilter("ignore")
    makers: dict[str, type[Sandbox]] = {"process": ProcessSandbox}
    reason = bubblewrap_unavailable_reason()
    if reason is None:
        makers["bubblewrap"] = BubblewrapSandbox
    else:
        print(f"bubblewrap skipped: {reason}")
    rates: dict[tuple[str, int], float] = {}
    for name, make in makers.items():
        for concurrency in (1, 8):
            rates[name, concurrency] = asyncio.run(rate(make(concurrency=concurrency), runs))
            print(f"{name:>10} concurrency {concurrency}: {rates[name, concurrency]:6.1f} runs/s")
    if ("bubblewrap", 8) in rates:
        print(f"bubblewrap/process at concurrency 8: {rates['bubblewrap', 8] / rates['process', 8]:.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
