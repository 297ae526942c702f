"""Simulated per-call latency, so pipelining and concurrency can be tested and benchmarked.

A call's latency is the time the simulated service takes for it, its own computation (the
pseudo-model's logprobs, the completions) included: the noop clients compute first and then
sleep what is left (`pad`), so a call takes max(latency, compute), as a remote call would, instead
of latency plus the stand-in's CPU time on the caller's event loop."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping

from kitchen.engine.errors import ConfigError

LATENCY_KINDS: tuple[str, ...] = (
    "create_training_client",
    "create_training_client_from_state",
    "create_sampling_client",
    "sample",
    "compute_logprobs",
    "forward",
    "forward_backward",
    "forward_backward_custom",
    "optim_step",
    "save_state",
    "load_state",
    "save_weights_for_sampler",
    "save_weights_and_get_sampling_client",
)


class Latency:
    """Seconds to sleep per call kind; kinds not given take no time. Unknown kinds are an error."""

    def __init__(self, seconds_by_kind: Mapping[str, float] | None = None) -> None:
        seconds = dict(seconds_by_kind or {})
        for kind, value in seconds.items():
            if kind not in LATENCY_KINDS:
                raise ConfigError(f"noop_latency: unknown call kind {kind!r}; known: {', '.join(LATENCY_KINDS)}")
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"noop_latency[{kind!r}] must be a finite number >= 0, got {value!r}")
        self.seconds_by_kind = seconds

    def seconds(self, kind: str) -> float:
        return self.seconds_by_kind.get(kind, 0.0)

    async def pad(self, kind: str, started: float) -> None:
        """Sleep what is left of `kind`'s latency since `started` (the event loop's `time()`),
        yielding to other tasks even when nothing is left."""
        elapsed = asyncio.get_running_loop().time() - started
        await asyncio.sleep(max(0.0, self.seconds(kind) - elapsed))

    async def wait(self, kind: str) -> None:
        """Sleep for `kind`'s latency (yielding to other tasks even when it is zero)."""
        await asyncio.sleep(self.seconds(kind))
