"""Several SDK clients training their own LoRAs on one base through one `kitchen serve`, each in
its own thread, as separate programs would: what the multi-tenant test and benchmark drive.

Each tenant trains a LoRA (its own seed) on its own fixed batch with pipelined requests
(forward_backward and optim_step submitted before either result is awaited), and reports the
logprobs of its batch after training; the same tenant run alone must report the same numbers.
`rl_tenant` is the RL-like loop instead: each step samples a group of completions from the
current weights, then trains on them (importance sampling, group-relative advantages).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import tinker
from tinker import types

from tests.serve.server_process import API_KEY

LEARNING_RATE = 0.01
RL_GROUP = 4
"""Completions per RL step (one prompt's group)."""
RL_TOKENS = 16
"""Each completion's token budget."""


def batch_of(tenant: int, size: int = 2, length: int = 16) -> list[types.Datum]:
    """Tenant `tenant`'s fixed training batch (distinct token sequences per tenant)."""
    data = []
    for row in range(size):
        tokens = [(7 * tenant + 13 * row + 31 * i) % 400 + 5 for i in range(length + 1)]
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": types.TensorData(data=tokens[1:], dtype="int64", shape=[length]),
                    "weights": types.TensorData(data=[1.0] * length, dtype="float32", shape=[length]),
                },
            )
        )
    return data


@dataclass
class TenantResult:
    tenant: int
    losses: list[float]
    logprobs: list[list[float]]


def train_tenant(
    url: str, tenant: int, steps: int, base: str = "tiny", on_step: Callable[[int, int], None] | None = None
) -> TenantResult:
    """Train tenant `tenant`'s LoRA for `steps` steps; its losses and final logprobs."""
    service = tinker.ServiceClient(base_url=url, api_key=API_KEY)
    try:
        training = service.create_lora_training_client(base, rank=4, seed=tenant).result()
        data = batch_of(tenant)
        losses = []
        for step in range(steps):
            fb = training.forward_backward(data, "cross_entropy")
            opt = training.optim_step(types.AdamParams(learning_rate=LEARNING_RATE))
            losses.append(fb.result().metrics["loss:sum"])
            opt.result()
            if on_step is not None:
                on_step(tenant, step + 1)
        out = training.forward(data, "cross_entropy").result()
        logprobs = [[float(x) for x in row["logprobs"].data] for row in out.loss_fn_outputs]
        return TenantResult(tenant, losses, logprobs)
    finally:
        service.close("success").result()


def rl_datum(prompt: list[int], sequence: types.SampledSequence, advantage: float) -> types.Datum:
    """An importance-sampling datum of one completion: its tokens scored after the prompt."""
    tokens = [*prompt, *sequence.tokens]
    scored = len(prompt) - 1  # prompt positions predict no completion token: zero advantage
    sampled = [float(x) for x in sequence.logprobs or [0.0] * len(sequence.tokens)]
    length = len(tokens) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=tokens[1:], dtype="int64", shape=[length]),
            "logprobs": types.TensorData(data=[0.0] * scored + sampled, dtype="float32", shape=[length]),
            "advantages": types.TensorData(
                data=[0.0] * scored + [advantage] * len(sequence.tokens), dtype="float32", shape=[length]
            ),
        },
    )


def rl_tenant(
    url: str, tenant: int, steps: int, base: str = "tiny", on_step: Callable[[int, int], None] | None = None
) -> TenantResult:
    """Tenant `tenant`'s RL-like loop for `steps` steps: sample a group from a sampling client on
    the current weights, reward each completion by its share of even tokens, train on the group's
    advantages. Its losses, and the logprobs of its last group as sampled."""
    service = tinker.ServiceClient(base_url=url, api_key=API_KEY)
    try:
        training = service.create_lora_training_client(base, rank=4, seed=tenant).result()
        prompt = batch_of(tenant)[0].model_input.to_ints()[:8]
        losses: list[float] = []
        logprobs: list[list[float]] = []
        for step in range(steps):
            sampler = training.save_weights_and_get_sampling_client().result()
            params = types.SamplingParams(max_tokens=RL_TOKENS, temperature=1.0, seed=1000 * tenant + step)
            group = sampler.sample(types.ModelInput.from_ints(prompt), RL_GROUP, params).result().sequences
            rewards = [sum(t % 2 == 0 for t in s.tokens) / max(1, len(s.tokens)) for s in group]
            mean = sum(rewards) / len(rewards)
            data = [rl_datum(prompt, s, r - mean) for s, r in zip(group, rewards, strict=True)]
            fb = training.forward_backward(data, "importance_sampling")
            opt = training.optim_step(types.AdamParams(learning_rate=LEARNING_RATE))
            losses.append(fb.result().metrics["loss:sum"])
            opt.result()
            logprobs = [[float(x) for x in s.logprobs or []] for s in group]
            if on_step is not None:
                on_step(tenant, step + 1)
        return TenantResult(tenant, losses, logprobs)
    finally:
        service.close("success").result()


Loop = Callable[[str, int, int, str, Callable[[int, int], None] | None], TenantResult]
"""A tenant's run: `train_tenant` or `rl_tenant`."""


def train_together(
    url: str,
    tenants: int,
    steps: int,
    on_step: Callable[[int, int], None] | None = None,
    base: str = "tiny",
    loop: Loop = train_tenant,
) -> list[TenantResult]:
    """Every tenant at once, each in its own thread; their results in tenant order."""
    results: list[TenantResult | BaseException | None] = [None] * tenants

    def run(tenant: int) -> None:
        try:
            results[tenant] = loop(url, tenant, steps, base, on_step)
        except BaseException as exc:  # reported below, with the tenant that raised it
            results[tenant] = exc

    threads = [threading.Thread(target=run, args=(tenant,)) for tenant in range(tenants)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    finished = []
    for tenant, result in enumerate(results):
        if not isinstance(result, TenantResult):
            raise RuntimeError(f"tenant {tenant} failed: {result!r}")
        finished.append(result)
    return finished


def max_relative_difference(a: list[list[float]], b: list[list[float]]) -> float:
    return max(
        abs(x - y) / max(abs(y), 1e-12) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True)
    )
