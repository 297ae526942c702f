"""Several tinker SDK clients training their own LoRAs on one base through one `kitchen serve
--backend local`: correctness under load, the server's memory, and throughput.

`--tenants` clients (default 8) each train a LoRA (rank 4, their own seed) on their own batch for
`--steps` steps (default 100), all at once, pipelined as the SDK pipelines, on `--model` (the
embedded tiny model, or the 32M one). Printed: every future answered (each tenant's step count),
each tenant's final logprobs against the same tenant trained alone (max relative difference;
goal <= 1e-5), the server's RSS at step 20 and at the last step (ratio; goal within 5%), and
steps/s all together against one tenant alone (goal: >= 4x with 8 tenants): the tenants'
forward_backward requests that wait together run as one pass through the shared base
(`adapters.local.lora_group`), their optimizer steps one by one.

`--loop rl` runs the sampling-heavy RL-like loop instead (`tests.serve.multitenant.rl_tenant`:
per step, a sampling client on the current weights, a group of 4 completions of 16 tokens, one
importance-sampling forward_backward and an optimizer step): the tenants' sample requests that
wait together decode as one batch too. Its logprobs line compares the last group's sampled
logprobs with the tenant's solo run (the same seeds: the same samples, to float rounding).

    PYTHONPATH=. .venv/bin/python benchmarks/serve_multitenant.py --tenants 8 --steps 100 --model tiny
    PYTHONPATH=. .venv/bin/python benchmarks/serve_multitenant.py --loop rl --steps 20 --model 32m
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import psutil

from benchmarks._models import model_name
from tests.serve.multitenant import max_relative_difference, rl_tenant, train_tenant, train_together
from tests.serve.server_process import ServerProcess


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--model", choices=("tiny", "32m"), default="tiny")
    parser.add_argument("--loop", choices=("train", "rl"), default="train", help="training only, or sample + train")
    parser.add_argument("--solo-checks", type=int, default=2, help="tenants also trained alone for the comparison")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="serve-multitenant-"))
    extra = ["local.cpu_threads=1"]
    base = args.model
    if args.model != "tiny":  # served under its size's name (a path is not a served name)
        (folder / "models.yaml").write_text(f"{args.model}: {model_name(args.model, folder)}\n")
        extra += ["--models", str(folder / "models.yaml")]
    server = ServerProcess(folder / "store", backend="local", extra=extra).start()
    assert server.process is not None
    process = psutil.Process(server.process.pid)
    rss: dict[int, int] = {}
    lock = threading.Lock()
    done_steps = [0] * args.tenants

    def on_step(tenant: int, step: int) -> None:
        with lock:
            done_steps[tenant] = step
            slowest = min(done_steps)
            for mark in (20, args.steps):
                if slowest >= mark and mark not in rss:
                    rss[mark] = process.memory_info().rss

    try:
        start = time.perf_counter()
        loop = rl_tenant if args.loop == "rl" else train_tenant
        together = train_together(server.url, args.tenants, args.steps, on_step, base, loop)
        together_s = time.perf_counter() - start
        start = time.perf_counter()
        alone = [loop(server.url, tenant, args.steps, base, None) for tenant in range(args.solo_checks)]
        alone_s = (time.perf_counter() - start) / max(1, args.solo_checks)
    finally:
        server.stop()
    print(f"steps answered per tenant: {[len(r.losses) for r in together]} (of {args.steps})")
    for solo in alone:
        difference = max_relative_difference(together[solo.tenant].logprobs, solo.logprobs)
        print(f"tenant {solo.tenant}: final logprobs vs alone, max relative difference {difference:.2e}")
    if 20 in rss and args.steps in rss:
        print(
            f"server RSS: {rss[20] / 2**20:.0f} MiB at step 20, {rss[args.steps] / 2**20:.0f} MiB at step {args.steps} "
            f"(ratio {rss[args.steps] / rss[20]:.3f})"
        )
    together_rate = args.tenants * args.steps / together_s
    alone_rate = args.steps / alone_s
    print(
        f"model {args.model}, loop {args.loop}: steps/s {together_rate:.2f} with {args.tenants} tenants, "
        f"{alone_rate:.2f} alone "
        f"(ratio {together_rate / alone_rate:.2f})"
    )


if __name__ == "__main__":
    main()
