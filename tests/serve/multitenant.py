"""Several SDK clients training their own LoRAs on one base through one `kitchen serve`, each in
its own thread, as separate programs would: what the multi-tenant test and benchmark drive.

Each tenant trains a LoRA (its own seed) on its own fixed batch with pipelined requests
(forward_backward and optim_step submitted before either result is awaited), and reports the
logprobs of its batch after training; the same tenant run alone must report the same numbers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import tinker
from tinker import types

from tests.serve.server_process import API_KEY

LEARNING_RATE = 0.01


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


def train_together(
    url: str, tenants: int, steps: int, on_step: Callable[[int, int], None] | None = None, base: str = "tiny"
) -> list[TenantResult]:
    """Every tenant at once, each in its own thread; their results in tenant order."""
    results: list[TenantResult | BaseException | None] = [None] * tenants

    def run(tenant: int) -> None:
        try:
            results[tenant] = train_tenant(url, tenant, steps, base, on_step)
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
