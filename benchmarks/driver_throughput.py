"""How many rollouts per second the single controller can drive: episodes in flight at once on
the noop backend with simulated sample latency, at 1k, 10k and 100k concurrent episodes.

    PYTHONPATH=. python benchmarks/driver_throughput.py [--episodes 1000 10000 100000] [--latency 2.0]
        [--group-size 8] [--max-tokens 16] [--turns 1]

Each level rolls out `episodes` episodes of the parity env (`recipes.envs.parity`) at once,
`episodes / group_size` groups gathered exactly as the RL step's `DoRollouts` does
(`sample_group`: one shared sample call per group and turn, seeds derived per group), against a
noop sampler whose every call takes `--latency` seconds. A service that answered every call in
exactly its latency would let the driver finish a wave in `turns * latency` seconds, so the
ideal rate is `episodes / (turns * latency)`; what the driver gets is printed beside it.

The driver's CPU time per episode (`time.process_time`, which a loaded machine inflates far less
than the wall clock) is what bounds it: one core can drive at most `1 / cpu_per_episode` rollouts
per second, whatever the engines' speed. The noop sampler's simulated decode runs on the same
event loop (a remote engine's would not), so it is measured on its own (the same sample calls,
no env, no latency) and subtracted: `driver µs/episode` is the controller's own share (env,
rollout bookkeeping, seeds, asyncio), `noop µs/episode` the stand-in's. The last line is the
driver-only ceiling in rollouts/s, the figure docs/explanation/scaling.md uses.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from dataclasses import dataclass

from adapters.common.tokenizer import load_tokenizer
from adapters.noop.backend import NoopBackend
from adapters.noop.sampling_client import NoopSamplingClient
from recipes.envs.parity import ParityDataset
from train_core.renderers.registry import get_renderer
from train_core.rl.rollouts import RolloutOptions, SampledGroup, sample_group
from train_core.types import ModelInput, SampleResult, SamplingParams

BASE_MODEL = "noop-bench"


@dataclass(frozen=True)
class Level:
    episodes: int
    wall_s: float
    cpu_s: float
    noop_cpu_s: float
    turns: int
    latency_s: float

    @property
    def rollouts_per_s(self) -> float:
        return self.episodes / self.wall_s

    @property
    def ideal_per_s(self) -> float:
        return self.episodes / (self.turns * self.latency_s)

    @property
    def driver_us(self) -> float:
        return 1e6 * max(self.cpu_s - self.noop_cpu_s, 0.0) / self.episodes

    @property
    def noop_us(self) -> float:
        return 1e6 * self.noop_cpu_s / self.episodes


async def _sampler(latency_s: float) -> NoopSamplingClient:
    backend = NoopBackend(seed=0, latency={"sample": latency_s})
    return await backend.create_sampling_client(base_model=BASE_MODEL)


class Recorded:
    """The noop sampler, keeping each call's arguments so its own share can be replayed."""

    def __init__(self, sampler: NoopSamplingClient) -> None:
        self.sampler = sampler
        self.calls: list[tuple[ModelInput, int, SamplingParams]] = []

    async def sample(self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams) -> SampleResult:
        self.calls.append((prompt, num_samples, sampling_params))
        return await self.sampler.sample(prompt, num_samples, sampling_params)


async def rollout_wave(episodes: int, group_size: int, turns: int, max_tokens: int, latency_s: float) -> Level:
    """All `episodes` rolled out at once, as one RL step's `DoRollouts` would; timed."""
    renderer = get_renderer("role_colon", load_tokenizer("tiny"))
    groups = episodes // group_size
    dataset = ParityDataset(renderer, 1, groups, group_size, turns, 0.01, seed=0)
    builders = dataset.get_batch(0)
    sampler = Recorded(await _sampler(latency_s))
    params = SamplingParams(max_tokens=max_tokens, temperature=1.0)
    options = RolloutOptions()
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    results = await asyncio.gather(
        *(sample_group(b, sampler, 0, params, ("train", 0, 0, i), options) for i, b in enumerate(builders))
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    done = sum(len(r.trajectories.trajectories_G) for r in results if isinstance(r, SampledGroup))
    if done != groups * group_size:
        raise RuntimeError(f"{done} of {groups * group_size} episodes finished")
    noop_cpu = await noop_share(sampler.calls)
    return Level(done, wall, cpu, noop_cpu, turns, latency_s)


async def noop_share(calls: list[tuple[ModelInput, int, SamplingParams]]) -> float:
    """CPU seconds of the same sample calls replayed one by one on a zero-latency noop sampler:
    the stand-in's simulated decode, which ran on the driver's loop above."""
    sampler = await _sampler(0.0)
    started = time.process_time()
    for prompt, num_samples, params in calls:
        await sampler.sample(prompt, num_samples, params)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per sample call")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--turns", type=int, default=1)
    args = parser.parse_args()
    print(
        f"noop sample latency {args.latency}s, group size {args.group_size}, "
        f"{args.max_tokens} tokens/sample, {args.turns} turn(s)"
    )
    print(f"{'episodes':>9} {'wall s':>8} {'rollouts/s':>11} {'ideal/s':>9} {'driver µs/ep':>13} {'noop µs/ep':>11}")
    levels = []
    for episodes in args.episodes:
        level = asyncio.run(rollout_wave(episodes, args.group_size, args.turns, args.max_tokens, args.latency))
        levels.append(level)
        print(
            f"{level.episodes:>9} {level.wall_s:>8.2f} {level.rollouts_per_s:>11.0f} {level.ideal_per_s:>9.0f} "
            f"{level.driver_us:>13.0f} {level.noop_us:>11.0f}"
        )
    worst = max(level.driver_us for level in levels)
    print(f"driver-only ceiling (one core, worst level): {1e6 / worst:.0f} rollouts/s")


if __name__ == "__main__":
    main()
