"""The distributed local backend (`local.num_workers=2`: FSDP2 over two Ray actors, gloo, cpu)
against the single-process one: same losses, weights and checkpoints; worker faults fail the step.

One Ray instance and one pool of worker groups serve the module (starting two worker processes
takes seconds on a busy machine; the CLI runs start their own), and it is marked slow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("ray", reason="the distributed local backend needs Ray (pip install 'kitchen[distributed]')")

from adapters.local.backend import LocalBackend
from adapters.local.checkpoint_io import read_weights
from adapters.local.distributed import (
    DistributedOptions,
    DistributedTrainingClient,
    WorkerFailure,
    WorkerPool,
    ensure_ray,
    split_by_tokens,
    spread_placement,
)
from adapters.local.distributed_worker import FAULT_ENV
from kitchen.apps.cli import main
from kitchen.engine.errors import KitchenError
from kitchen.engine.runs.metrics import read_metrics
from kitchen.testing.contract.data import encode_texts, sft_datum
from train_core.types import AdamParams, Datum, ModelInput, TensorData

pytestmark = pytest.mark.slow

LR = 1e-4
"""Adam normalises each gradient component, so float rounding in near-zero components (a different
summation order across workers) moves the weights by up to ~lr per step: at 1e-3 the largest gap
after three steps was 2.2e-5; 1e-4 keeps it under 1e-5. Losses agree to ~1e-7 relative either way."""
TOL = 1e-5


POOL = WorkerPool()


@pytest.fixture(scope="module", autouse=True)
def ray_session() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ray = ensure_ray(None)
    yield
    POOL.close()
    ray.shutdown()
    torch.set_num_threads(threads)


def distributed(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path, distributed=DistributedOptions(2, None, 120.0, 1), worker_pool=POOL)


def batch(backend: LocalBackend) -> list[Datum]:
    texts = [*encode_texts(backend), backend.get_tokenizer("tiny").encode("one more line", add_special_tokens=False)]
    return [sft_datum(tokens) for tokens in texts]


def rl_batch(data: Sequence[Datum]) -> list[Datum]:
    """importance_sampling inputs: made-up sampler logprobs and advantages of both signs."""
    out = []
    for index, datum in enumerate(data):
        n = datum.model_input.length
        out.append(
            Datum(
                datum.model_input,
                {
                    "target_tokens": datum.loss_fn_inputs["target_tokens"],
                    "logprobs": TensorData.from_list([-7.0 - 0.01 * t for t in range(n)], "float32"),
                    "advantages": TensorData.from_list(
                        [(-1.0) ** index * (0.5 + 0.1 * t) for t in range(n)], "float32"
                    ),
                },
            )
        )
    return out


def pair_loss(data: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    """A DPO-like custom loss coupling datum k with datum D-1-k: pairs that straddle the workers."""
    last = len(logprobs_D) - 1
    margins = torch.stack([logprobs_D[i].sum() - logprobs_D[last - i].sum() for i in range(len(logprobs_D) // 2)])
    loss = -torch.nn.functional.logsigmoid(0.1 * margins).sum()
    return loss, {"margin": float(margins.detach().mean())}


async def train(client: Any, data: list[Datum], steps: int = 3) -> list[float]:
    """`steps` steps of each loss in turn (cross_entropy, importance_sampling, custom): losses."""
    losses = []
    for _ in range(steps):
        for call in (
            client.forward_backward(data, "cross_entropy"),
            client.forward_backward(rl_batch(data), "importance_sampling"),
            client.forward_backward_custom(data, pair_loss),
        ):
            output = await (await call)
            losses.append(output.metrics["loss:sum"])
        await (await client.optim_step(AdamParams(learning_rate=LR, grad_clip_norm=100.0)))
    return losses


def close(values: Sequence[float], expected: Sequence[float]) -> bool:
    return len(values) == len(expected) and all(
        abs(v - e) <= TOL * max(1.0, abs(e)) for v, e in zip(values, expected, strict=True)
    )


def max_weight_diff(a: str, b: str) -> float:
    wa, wb = read_weights(Path(a)), read_weights(Path(b))
    assert wa.keys() == wb.keys()
    return max(float((wa[k] - wb[k]).abs().max()) for k in wa)


def test_split_by_tokens_is_contiguous_balanced_and_covers_every_datum() -> None:
    assert split_by_tokens([5, 5, 5, 5], 2) == [range(0, 2), range(2, 4)]
    assert split_by_tokens([1, 1, 1, 20], 2) == [range(0, 3), range(3, 4)]
    assert split_by_tokens([10, 1, 1, 1], 2) == [range(0, 1), range(1, 4)]
    assert split_by_tokens([3], 2) == [range(0, 1), range(1, 1)]


def test_workers_ray_cannot_place_fail_in_time_naming_the_free_resources() -> None:
    ray = ensure_ray(None)
    before = len(ray.util.placement_group_table())
    with pytest.raises(WorkerFailure, match=r"could not place 2 workers .*'GPU': 1.0.* free resources: \{"):
        spread_placement(ray, 2, use_cuda=True, timeout_s=1.0)  # this Ray has no GPU
    states = [group["state"] for group in ray.util.placement_group_table().values()]
    assert len(states) == before + 1 and states[-1] == "REMOVED"


@pytest.mark.parametrize("lora_rank", [None, 4])
def test_two_workers_match_one_process_and_checkpoints_cross_worker_counts(
    tmp_path: Path, lora_rank: int | None
) -> None:
    """Three steps of three losses: same per-step losses and weights (float32); then the 2-worker
    checkpoint resumes on 1 worker and the 1-worker one on 2, each reproducing the next step."""

    async def run() -> None:
        single, dist = LocalBackend(tmp_path / "one"), distributed(tmp_path / "two")
        data = batch(single)
        one = await single.create_training_client("tiny", lora_rank=lora_rank)
        two = await dist.create_training_client("tiny", lora_rank=lora_rank)
        losses_one, losses_two = await train(one, data), await train(two, data)
        assert close(losses_two, losses_one), (losses_two, losses_one)
        state_one = await (await one.save_state("s3"))
        state_two = await (await two.save_state("s3"))
        assert max_weight_diff(state_one, state_two) <= TOL
        # logprobs come back per datum, in datum order
        out_one = await (await one.forward(data, "cross_entropy"))
        out_two = await (await two.forward(data, "cross_entropy"))
        for a, b in zip(out_one.loss_fn_outputs, out_two.loss_fn_outputs, strict=True):
            assert close(b["logprobs"].tolist(), a["logprobs"].tolist())
        # resume across worker counts: each continues exactly as its source would
        next_one, next_two = await train(one, data, steps=1), await train(two, data, steps=1)
        two_from_one = await dist.create_training_client_from_state(state_one)
        one_from_two = await single.create_training_client_from_state(state_two)
        assert close(await train(two_from_one, data, steps=1), next_one)
        assert close(await train(one_from_two, data, steps=1), next_two)
        await single.close()
        await dist.close()

    asyncio.run(run())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mixed_precision_workers_keep_float32_shards_and_match_one_process(tmp_path: Path, dtype: str) -> None:
    """FSDP2's mixed precision (float32 shards and gradient reductions, low-precision compute)
    against the single-process master weights: the same losses within the low precision's
    rounding (summation orders differ), and a checkpoint of float32 weights; float16 steps under
    a loss scale agreed by both workers."""

    async def run() -> None:
        single = LocalBackend(tmp_path / "one", dtype=dtype)
        dist = LocalBackend(
            tmp_path / "two", dtype=dtype, distributed=DistributedOptions(2, None, 120.0, 1), worker_pool=POOL
        )
        data = batch(single)
        one, two = await single.create_training_client("tiny"), await dist.create_training_client("tiny")
        losses_one, losses_two = await train(one, data, steps=2), await train(two, data, steps=2)
        assert all(abs(a - b) <= 2e-2 * max(1.0, abs(a)) for a, b in zip(losses_one, losses_two, strict=True))
        await (await two.forward(data, "cross_entropy"))  # the root keeps its gathered low-precision weights
        state = await (await two.save_state("s2"))
        weights = read_weights(Path(state))
        assert all(w.dtype == torch.float32 for w in weights.values())
        assert max_weight_diff(await (await one.save_state("s2")), state) < 1e-3
        metrics = (await (await two.optim_step(AdamParams(learning_rate=LR)))).metrics
        assert ("loss_scale" in metrics) == (dtype == "float16")
        await single.close()
        await dist.close()

    asyncio.run(run())


def test_a_closed_clients_workers_serve_the_next_client_from_the_base_weights(tmp_path: Path) -> None:
    """The pool hands the same worker group to the next client, rebuilt (LoRA, then full weights):
    its first step is a fresh client's (weights and AdamW moments reset). A custom loss that fails
    in the driver leaves the client as it was, and a custom loss on fewer datums than workers (one
    worker runs a stand-in pass) trains as on one process."""

    def one_datum_loss(batch: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        return -logprobs_D[0].sum(), {}

    async def run() -> None:
        single, dist = LocalBackend(tmp_path / "one"), distributed(tmp_path / "two")
        data = batch(single)
        first = await dist.create_training_client("tiny", lora_rank=4)
        reference = await single.create_training_client("tiny", lora_rank=4)
        for client in (first, reference):
            await train(client, data, steps=1)
            with pytest.raises(KitchenError, match="custom loss must return a scalar tensor"):
                await (await client.forward_backward_custom(data, lambda batch, lps: (torch.tensor(0.0), {})))
        assert close(await train(first, data, steps=1), await train(reference, data, steps=1))
        losses = []
        for client in (first, reference):
            output = await (await client.forward_backward_custom(data[:1], one_datum_loss))
            await (await client.optim_step(AdamParams(learning_rate=LR)))
            after = await (await client.forward(data, "cross_entropy"))
            losses.append([output.metrics["loss:sum"], after.metrics["loss:sum"]])
        assert close(losses[0], losses[1]), losses
        await first.close()
        second = await dist.create_training_client("tiny")
        assert isinstance(first, DistributedTrainingClient) and isinstance(second, DistributedTrainingClient)
        assert second._group is first._group
        expected = await train(await single.create_training_client("tiny"), data, steps=2)
        assert close(await train(second, data, steps=2), expected)
        await single.close()
        await dist.close()

    asyncio.run(run())


def test_sampling_client_gets_the_trained_weights_and_a_stale_client_keeps_its_snapshot(tmp_path: Path) -> None:
    async def run() -> None:
        dist = distributed(tmp_path)
        data = batch(dist)
        client = await dist.create_training_client("tiny")
        before = await client.save_weights_and_get_sampling_client()
        await train(client, data, steps=1)
        after = await client.save_weights_and_get_sampling_client("w1")
        last = int(data[0].loss_fn_inputs["target_tokens"].data[-1])
        tokens = ModelInput.from_ints([*data[0].model_input.to_ints(), last])

        async def scored(sampler: Any) -> list[float]:
            return [float(v) for v in (await sampler.compute_logprobs(tokens))[1:] if v is not None]

        scored_after, scored_before = await scored(after), await scored(before)
        trained = (await (await client.forward([data[0]], "cross_entropy"))).loss_fn_outputs[0]["logprobs"].tolist()
        assert max(abs(a - b) for a, b in zip(scored_after, trained, strict=True)) < 1e-4  # on-policy
        assert max(abs(a - b) for a, b in zip(scored_before, trained, strict=True)) > 1e-3  # a snapshot
        from_disk = await dist.create_sampling_client(model_path=str(tmp_path / "sampler_weights" / "w1"))
        assert max(abs(a - b) for a, b in zip(await scored(from_disk), trained, strict=True)) < 1e-4
        await dist.close()

    asyncio.run(run())


def test_kitchen_run_sl_basic_on_two_workers_then_resume_on_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    args = ["run", "sl_basic", f"log_path={run_dir}", "eval.every=0", "checkpoint.save_every=2", "data.batch_size=8"]
    assert main([*args, "local.num_workers=2", "data.max_steps=3"]) == 0, capsys.readouterr().err
    assert main([*args, "local.num_workers=1", "data.max_steps=5"]) == 0, capsys.readouterr().err
    assert max(row["step"] for row in read_metrics(run_dir / "metrics.jsonl")) == 4


def test_a_worker_killed_mid_step_fails_the_run_with_exit_1_naming_it_and_the_run_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    args = ["run", "sl_basic", f"log_path={run_dir}", "eval.every=0", "checkpoint.save_every=1", "data.batch_size=8"]
    monkeypatch.setenv(FAULT_ENV, "1:forward_backward:3")  # worker 1 exits during the third step
    code = main([*args, "local.num_workers=2", "local.worker_timeout_s=60", "data.max_steps=5"])
    err = capsys.readouterr().err
    assert code == 1, err  # a runtime failure, not bad input (2)
    assert "worker 1 died during forward_backward on node " in err
    monkeypatch.delenv(FAULT_ENV)
    assert main([*args, "local.num_workers=2", "data.max_steps=5"]) == 0, capsys.readouterr().err
    assert max(row["step"] for row in read_metrics(run_dir / "metrics.jsonl")) == 4
