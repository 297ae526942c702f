"""Running episodes: one env to completion, or a whole group of envs concurrently, with the
group's requests for one prompt served by one sample call and seeds derived from where a group is
drawn (so reruns and resumed runs draw the same samples)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from train_core.rl.data_processing import shared_prompt_tokens
from train_core.rl.types import (
    EPISODE_STOPS,
    LIMIT_STOPS,
    Env,
    EnvGroupBuilder,
    Metrics,
    Trajectory,
    TrajectoryGroup,
    Transition,
    has_reward_spread,
)
from train_core.types import ModelInput, SampleResult, SamplingParams, StopCondition, TokensWithLogprobs

TokenPolicy = Callable[[ModelInput, StopCondition], Awaitable[TokensWithLogprobs]]
"""Samples one action for an observation, stopping at the env's stop condition."""

_T = TypeVar("_T")


class Sampler(Protocol):
    """The part of a sampling client a policy needs (kitchen's SamplingClient satisfies it)."""

    async def sample(self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams) -> SampleResult: ...


def sampling_policy(sampler: Sampler, params: SamplingParams) -> TokenPolicy:
    """A policy drawing one sample per call; the env's stop condition replaces `params.stop`."""

    async def policy(ob: ModelInput, stop: StopCondition) -> TokensWithLogprobs:
        result = await sampler.sample(ob, 1, dataclasses.replace(params, stop=stop))
        return result.sequences[0]

    return policy


@dataclass(frozen=True)
class RolloutLimits:
    """Per-episode limits; None = no limit. A limit that stops an episode sets its `stop_reason`.

    `max_turns`: actions per episode. `max_tokens`: sampled tokens over all its turns (checked
    after each turn). `timeout_s`: wall-clock budget of the whole episode (env calls and sampling;
    a sample other episodes share is not cancelled, it still serves them). `max_context_tokens`:
    an observation longer than this is not sampled from (`overflow`).
    """

    max_turns: int | None = None
    max_tokens: int | None = None
    timeout_s: float | None = None
    max_context_tokens: int | None = None


TerminationReward = float | Literal["zero"] | None
"""For episodes a limit stopped: None = keep the env's rewards; a number = add it to the episode's
total reward; "zero" = the total is clamped to `min(total, 0)`, as tinker-cookbook's
`zero_reward_on_limit` does: the episode is graded as usual, it never profits from running into a
limit, and a negative grade keeps its signal."""


FailurePolicy = Literal["fail_fast", "retry", "min_viable_group"]


@dataclass(frozen=True)
class RolloutFailure:
    """What an exception in a group's env or sampling call does. `fail_fast`: the run fails.
    `retry`: the whole group is rolled out again (fresh envs, new seeds), up to `retries` times,
    then the run fails. `min_viable_group`: members that raised are left out, and the group is
    kept if at least `min_group_size` members finished (else it is dropped from the batch)."""

    policy: FailurePolicy = "fail_fast"
    retries: int = 2
    min_group_size: int = 2


@dataclass(frozen=True)
class RolloutOptions:
    limits: RolloutLimits = RolloutLimits()
    termination_reward: TerminationReward = None
    failure: RolloutFailure = RolloutFailure()


async def do_single_rollout(policy: TokenPolicy, env: Env, limits: RolloutLimits | None = None) -> Trajectory:
    """Alternate policy and env until the env says the episode is done or a limit stops it."""
    limits = limits or RolloutLimits()
    transitions: list[Transition] = []
    ob = ModelInput.empty()
    deadline = None if limits.timeout_s is None else asyncio.get_running_loop().time() + limits.timeout_s
    budget = asyncio.timeout_at(deadline)
    try:
        async with budget:
            ob, stop = await env.initial_observation()
            sampled = 0
            while True:
                if limits.max_context_tokens is not None and ob.length > limits.max_context_tokens:
                    return Trajectory(transitions, final_ob=ob, stop_reason="overflow")
                ac = await policy(ob, stop)
                result = await env.step(ac.tokens)
                transitions.append(
                    Transition(ob, ac, result.reward, result.episode_done, result.metrics, result.parse_ok)
                )
                ob, stop = result.next_observation, result.next_stop_condition
                sampled += len(ac.tokens)
                if result.episode_done:
                    return Trajectory(transitions, final_ob=ob)
                if limits.max_turns is not None and len(transitions) >= limits.max_turns:
                    return Trajectory(transitions, final_ob=ob, stop_reason="max_turns")
                if limits.max_tokens is not None and sampled >= limits.max_tokens:
                    return Trajectory(transitions, final_ob=ob, stop_reason="max_tokens")
    except TimeoutError:
        if not budget.expired():
            raise  # the env's own timeout, not the episode budget
        return Trajectory(transitions, final_ob=ob, stop_reason="timeout")


def apply_termination_reward(group: TrajectoryGroup, termination_reward: TerminationReward) -> TrajectoryGroup:
    """The group with each limit-stopped episode's final reward adjusted (see `TerminationReward`)."""
    if termination_reward is None:
        return group
    finals = list(group.final_rewards_G)
    for index, traj in enumerate(group.trajectories_G):
        if traj.stop_reason not in LIMIT_STOPS:
            continue
        if termination_reward == "zero":
            step_total = sum(t.reward for t in traj.transitions)
            if step_total + finals[index] > 0.0:
                finals[index] = -step_total  # the total becomes exactly 0, with no rounding residue
        else:
            finals[index] += float(termination_reward)
    return dataclasses.replace(group, final_rewards_G=finals)


async def _gather_or_cancel(coros: Sequence[Coroutine[Any, Any, _T]]) -> list[_T]:
    """Run concurrently, results in order; on the first failure cancel and await the rest.

    Plain `gather` leaves the siblings of a failed task running, so cleanup could pull resources
    out from under them; here nothing is still running when the error propagates.
    """
    tasks = [asyncio.create_task(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class GroupFailed(Exception):
    """Fewer members of a group finished than `min_group_size`."""


async def do_group_rollout(
    builder: EnvGroupBuilder,
    policy: TokenPolicy,
    options: RolloutOptions | None = None,
    envs: Awaitable[Sequence[Env]] | None = None,
) -> TrajectoryGroup:
    """Roll out every env of a group at once, then add the group rewards; always clean up.

    `envs`: the group's envs, already being built (`builder.make_envs()` started ahead, as async
    mode's workers do while they wait to be admitted); default: built here. Under
    `min_viable_group` a member that raises is left out (counted in `num_failed`); fewer than
    `min_group_size` finished members raise `GroupFailed`. Otherwise the first error fails the
    group, its other members cancelled."""
    options = options or RolloutOptions()
    try:
        envs_G = list(await (envs if envs is not None else builder.make_envs()))
        coros = [do_single_rollout(policy, env, options.limits) for env in envs_G]
        failed = 0
        if options.failure.policy != "min_viable_group":
            trajectories_G = await _gather_or_cancel(coros)
        else:
            outcomes = await asyncio.gather(*coros, return_exceptions=True)
            for outcome in outcomes:
                if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                    raise outcome
            errors = [o for o in outcomes if isinstance(o, Exception)]
            kept = [(env, o) for env, o in zip(envs_G, outcomes, strict=True) if isinstance(o, Trajectory)]
            failed = len(errors)
            if len(kept) < min(options.failure.min_group_size, len(envs_G)):
                raise GroupFailed(
                    f"{len(kept)} of {len(envs_G)} episodes finished, fewer than min_group_size "
                    f"{options.failure.min_group_size}: {errors[0]!r}"
                ) from errors[0]
            envs_G = [env for env, _ in kept]
            trajectories_G = [traj for _, traj in kept]
        rewards_and_metrics_G = await builder.compute_group_rewards(trajectories_G, envs_G)
        if len(rewards_and_metrics_G) != len(trajectories_G):
            raise ValueError(
                f"{type(builder).__name__}.compute_group_rewards returned {len(rewards_and_metrics_G)} "
                f"rewards for {len(trajectories_G)} trajectories"
            )
        group = TrajectoryGroup(
            trajectories_G=trajectories_G,
            final_rewards_G=[reward for reward, _ in rewards_and_metrics_G],
            metrics_G=[metrics for _, metrics in rewards_and_metrics_G],
            num_failed=failed,
        )
        return apply_termination_reward(group, options.termination_reward)
    finally:
        await builder.cleanup()


# -- groups sampled together, seeded by where they are drawn ---------------------------------


def derive_seed(*parts: object) -> int:
    """A 63-bit seed that is a stable function of `parts` (their reprs), across processes."""
    digest = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def shared_sampling_policy(sampler: Sampler, params: SamplingParams, seed_key: Sequence[Hashable]) -> TokenPolicy:
    """A policy for one group. The first request for a prompt waits one loop turn for the others
    to join, then samples for all. Each call's seed derives from `seed_key`, the prompt and how
    many calls that prompt had before, so a rerun draws the same samples."""
    followers_by_prompt: dict[tuple[Hashable, ...], list[asyncio.Future[TokensWithLogprobs]]] = {}
    calls_by_prompt: Counter[tuple[Hashable, ...]] = Counter()

    async def policy(ob: ModelInput, stop: StopCondition) -> TokensWithLogprobs:
        key = (tuple(ob.to_ints()), tuple(stop))
        followers = followers_by_prompt.get(key)
        if followers is not None:
            future: asyncio.Future[TokensWithLogprobs] = asyncio.get_running_loop().create_future()
            followers.append(future)
            return await future
        followers = followers_by_prompt[key] = []
        call: asyncio.Future[SampleResult] | None = None
        try:
            await asyncio.sleep(0)  # the group's other envs reach this prompt in the same loop turn
            del followers_by_prompt[key]
            seed = derive_seed(*seed_key, key, calls_by_prompt[key])
            calls_by_prompt[key] += 1
            call_params = dataclasses.replace(params, stop=stop, seed=seed)
            call = asyncio.ensure_future(sampler.sample(ob, 1 + len(followers), call_params))
            result = await asyncio.shield(call)
        except BaseException as exc:
            followers_by_prompt.pop(key, None)
            if call is not None and isinstance(exc, asyncio.CancelledError):
                _hand_over(call, followers)  # the leader was cancelled (its budget): the others still get samples
                raise
            for future in followers:
                if future.done():
                    continue
                if isinstance(exc, Exception):
                    future.set_exception(exc)
                else:
                    future.cancel()
            raise
        for future, sequence in zip(followers, result.sequences[1:], strict=True):
            if not future.done():
                future.set_result(sequence)
        return result.sequences[0]

    return policy


def _hand_over(call: asyncio.Future[SampleResult], followers: list[asyncio.Future[TokensWithLogprobs]]) -> None:
    """After the leader of a shared sample call was cancelled: its followers get their sequences
    when the call finishes; when no follower waits any more, the call is cancelled."""
    if all(f.done() for f in followers):
        call.cancel()
        return

    def deliver(done: asyncio.Future[SampleResult]) -> None:
        pending = [f for f in followers if not f.done()]
        if done.cancelled():
            for f in pending:
                f.cancel()
        elif (error := done.exception()) is not None:
            for f in pending:
                f.set_exception(error)
        else:
            for f, sequence in zip(followers, done.result().sequences[1:], strict=True):
                if not f.done():
                    f.set_result(sequence)

    def abandon(_: object) -> None:
        if all(f.done() for f in followers) and not call.done():
            call.cancel()

    call.add_done_callback(deliver)
    for f in followers:
        f.add_done_callback(abandon)


@dataclass(frozen=True)
class SampledGroup:
    builder: EnvGroupBuilder
    trajectories: TrajectoryGroup
    sampler_step: int
    """Optimizer steps the sampling weights had taken: a group trained at step s is
    `s - sampler_step` steps off-policy."""
    retries: int = 0
    """How many times the group was rolled out again after a failure (`retry` policy)."""


@dataclass(frozen=True)
class DroppedGroup:
    """A group left out of the batch under `min_viable_group`, and why."""

    builder: EnvGroupBuilder
    error: str


async def sample_group(
    builder: EnvGroupBuilder,
    sampler: Sampler,
    sampler_step: int,
    params: SamplingParams,
    seed_key: Sequence[Hashable],
    options: RolloutOptions | None = None,
    envs: Awaitable[Sequence[Env]] | None = None,
) -> SampledGroup | DroppedGroup:
    """Roll out one group with `sampler`; seeds derive from `seed_key` (see `shared_sampling_policy`).

    `options` sets the episode limits, the termination reward and the failure policy; only
    `min_viable_group` ever answers a `DroppedGroup`. `envs`, the group's envs built ahead, serve
    the first attempt (a retry builds its own)."""
    options = options or RolloutOptions()
    failure = options.failure
    attempts = 1 + (failure.retries if failure.policy == "retry" else 0)
    for attempt in range(attempts):
        key = tuple(seed_key) if attempt == 0 else (*seed_key, "retry", attempt)
        policy = shared_sampling_policy(sampler, params, key)
        try:
            group = await do_group_rollout(builder, policy, options, envs if attempt == 0 else None)
        except Exception as exc:
            if failure.policy == "min_viable_group":
                return DroppedGroup(builder, repr(exc) if not isinstance(exc, GroupFailed) else str(exc))
            if attempt + 1 < attempts:
                continue
            raise
        return SampledGroup(builder, group, sampler_step, retries=attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def kept_groups(results: Sequence[SampledGroup | DroppedGroup]) -> tuple[list[SampledGroup], list[DroppedGroup]]:
    """The sampled groups and the dropped ones, each in order."""
    return [r for r in results if isinstance(r, SampledGroup)], [r for r in results if isinstance(r, DroppedGroup)]


# -- what a step's rollouts are logged as ----------------------------------------------------


def _mean_per_key(dicts: Sequence[Metrics]) -> Metrics:
    """Mean of each key over the dicts that have it."""
    values: dict[str, list[float]] = defaultdict(list)
    for d in dicts:
        for key, value in d.items():
            values[key].append(float(value))
    return {key: sum(vs) / len(vs) for key, vs in values.items()}


def _by_group_metrics(groups_P: Sequence[TrajectoryGroup], good_threshold: float) -> Metrics:
    """Fractions of groups with mixed rewards (useful signal), all good, or all bad."""
    n_mixed = n_good = n_bad = 0
    for group in groups_P:
        rewards_G = group.get_total_rewards()
        if has_reward_spread(rewards_G):
            n_mixed += 1
        elif rewards_G[0] >= good_threshold:
            n_good += 1
        else:
            n_bad += 1
    n = len(groups_P)
    return {
        "by_group/frac_mixed": n_mixed / n,
        "by_group/frac_all_good": n_good / n,
        "by_group/frac_all_bad": n_bad / n,
    }


def _rollout_metrics(groups_P: Sequence[TrajectoryGroup], good_threshold: float) -> Metrics:
    """Reward, length and per-transition/per-trajectory env metrics over a set of groups."""
    trajs = [traj for group in groups_P for traj in group.trajectories_G]
    transitions = [t for traj in trajs for t in traj.transitions]
    rewards = [r for group in groups_P for r in group.get_total_rewards()]
    n_turns = len(transitions)
    n_ac_tokens = sum(len(t.ac.tokens) for t in transitions)
    n_ob_tokens = sum(t.ob.length for t in transitions)
    metrics: Metrics = {
        "reward/total": sum(rewards) / len(rewards),
        "ac_tokens_per_turn": n_ac_tokens / max(n_turns, 1),
        "ob_tokens_per_turn": n_ob_tokens / max(n_turns, 1),
        "turns_per_episode": n_turns / len(trajs),
        "total_episodes": float(len(trajs)),
        "total_turns": float(n_turns),
        "total_ac_tokens": float(n_ac_tokens),
        "total_ob_tokens": float(n_ob_tokens),
    }
    n_failed = sum(group.num_failed for group in groups_P)
    n_episodes = len(trajs) + n_failed
    stops = [traj.stop_reason for traj in trajs] + ["error"] * n_failed
    metrics.update({f"stop/{reason}": stops.count(reason) / n_episodes for reason in EPISODE_STOPS})
    metrics["frac_parse_errors"] = sum(not t.parse_ok for t in transitions) / max(n_turns, 1)
    group_metrics = [m for group in groups_P for m in group.metrics_G]
    metrics.update(_mean_per_key([t.metrics for t in transitions] + group_metrics))
    metrics.update(_by_group_metrics(groups_P, good_threshold))
    return metrics


def compute_trajectory_metrics(
    groups_P: Sequence[TrajectoryGroup], tags_P: Sequence[Sequence[str]], good_threshold: float = 0.5
) -> Metrics:
    """Rollout metrics under `env/all/...`, and under `env/{tag}/...` for each logging tag.

    Per-tag metrics are reported even when one tag covers the whole batch (the Python original
    then leaves them out), so a tag's series has no gaps in steps where only its groups came.
    A group counts as all-good when its common reward is >= `good_threshold`.
    """
    if not groups_P or not all(group.trajectories_G for group in groups_P):
        raise ValueError("compute_trajectory_metrics needs groups, each with at least one trajectory")
    groups_by_tag: dict[str, list[TrajectoryGroup]] = defaultdict(list)
    for group, tags in zip(groups_P, tags_P, strict=True):
        for tag in tags:
            groups_by_tag[tag].append(group)
    out: Metrics = {}
    for tag, groups in groups_by_tag.items():
        out.update({f"env/{tag}/{k}": v for k, v in _rollout_metrics(groups, good_threshold).items()})
    out.update({f"env/all/{k}": v for k, v in _rollout_metrics(groups_P, good_threshold).items()})
    return out


_BATCH_LEVEL = ("env/all/by_group/", "env/all/ac_tokens_per_turn")


def token_metrics(groups_P: Sequence[TrajectoryGroup]) -> Metrics:
    """Token accounting of a step's rollouts: prompt (observation) tokens over all turns, sampled
    tokens, and the prompt tokens shared between turns of a multi-turn episode (the earlier
    context each extending observation repeats; `tokens/prompt - tokens/prompt_shared` is what a
    prefix-caching sampler has to prefill)."""
    trajs = [traj for group in groups_P for traj in group.trajectories_G]
    transitions = [t for traj in trajs for t in traj.transitions]
    return {
        "tokens/prompt": float(sum(t.ob.length for t in transitions)),
        "tokens/sampled": float(sum(len(t.ac.tokens) for t in transitions)),
        "tokens/prompt_shared": float(sum(shared_prompt_tokens(traj) for traj in trajs)),
    }


def rollout_failure_metrics(groups: Sequence[SampledGroup], dropped: Sequence[DroppedGroup]) -> Metrics:
    """Groups rolled out again (`retry`), groups dropped and episodes left out (`min_viable_group`)."""
    return {
        "rollout/groups_retried": float(sum(g.retries > 0 for g in groups)),
        "rollout/retries": float(sum(g.retries for g in groups)),
        "rollout/groups_dropped": float(len(dropped)),
        "rollout/episodes_failed": float(sum(g.trajectories.num_failed for g in groups)),
    }


def rollout_metrics(groups: Sequence[SampledGroup], prefix: str = "env") -> Metrics:
    """Reward, length and env metrics under `{prefix}/all/...` and `{prefix}/{tag}/...`.

    Two families describe the batch rather than an env and drop the `env/all/` prefix:
    `by_group/frac_mixed|frac_all_good|frac_all_bad` and `ac_tokens_per_turn`.
    """
    raw = compute_trajectory_metrics([g.trajectories for g in groups], [g.builder.logging_tags() for g in groups])
    out: Metrics = token_metrics([g.trajectories for g in groups]) if prefix == "env" else {}
    for key, value in raw.items():
        if prefix == "env" and key.startswith(_BATCH_LEVEL):
            out[key.removeprefix("env/all/")] = value
        else:
            out[prefix + key.removeprefix("env")] = value
    return out
