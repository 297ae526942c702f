"""TrainingClient over N Ray actors holding FSDP2 shards of the model (`local.num_workers > 1`).

The driver (this process, where the runner lives) keeps what the single-process client keeps but
the trained model: the tokenizer, the checkpoint bookkeeping and a full copy of the model for the
sampler. Every call validates its arguments here at once, then queues a job on the client's own
worker thread (so jobs run strictly in submission order, and submitting returns at once); a job
calls every worker and waits for all of them, with a timeout.

- Built-in losses: the batch is cut into N contiguous runs of datums with about the same token
  count, one per worker; logprobs come back in datum order, `loss:sum` is the sum of the workers'.
  Losses are sums over tokens and FSDP sums (not averages) the gradients, so the gradient is the
  single-process one.
- Custom losses (DPO) may couple datums: rank 0 runs them on the whole batch, the others take part
  in the collectives with zero-weighted passes (correct, not parallel).
- Checkpoints: rank 0 gathers full tensors (weights, and the optimizer state in the single-process
  format) and the driver writes them with `checkpoint_io`, so they do not depend on the worker
  count. Loading sends the full tensors to every worker, which keeps its shard.
- Sampling: `save_weights_for_sampler` and `save_weights_and_get_sampling_client` gather the
  weights into the driver's model, which the sampler pool snapshots as in the single-process case.
- Faults: a worker that dies or does not answer within `timeout_s` fails the call with an error
  naming the worker and the call; the other workers are killed (they may wait in a collective)
  and the client is unusable after that; resume from the last checkpoint.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from adapters.common.training_batch import build_training_batch
from adapters.local.checkpoint_io import (
    CheckpointKind,
    ModelIdentity,
    checkpoint_path,
    copy_weights,
    read_optimizer,
    read_weights,
    require_same_model,
    write_checkpoint,
)
from adapters.local.distributed_worker import FAULT_ENV, TrainingWorker
from adapters.local.forward_pass import pad_token_id, vocab_size
from adapters.local.model_loading import LoraOptions
from adapters.local.request_batcher import DEFAULT_BATCH_LIMITS, BatchLimits
from adapters.local.sampler_pool import SamplerPool
from adapters.local.sampling_client import LocalSamplingClient
from adapters.local.serial_executor import SerialExecutor
from adapters.local.training_client import TrainingOptions, _check_adam, microbatches
from kitchen.errors import ConfigError, KitchenError
from kitchen.ports import CustomLossFn, Tokenizer
from train_core.losses import TARGET_TOKENS, get_loss_fn
from train_core.types import AdamParams, Datum, ForwardBackwardOutput, OptimStepOutput, TensorData


class WorkerFailure(KitchenError):
    """A training worker died or timed out; the message names it and the call."""


@dataclass(frozen=True)
class DistributedOptions:
    """The `local.*` settings of the distributed training client."""

    num_workers: int = 2
    ray_address: str | None = None
    """None: start (or reuse) a Ray instance on this machine; else the cluster to join."""
    timeout_s: float = 600.0
    """How long one call may take on the workers (and the process group's collective timeout)."""
    cpu_threads: int | None = None


def split_by_tokens(lengths_D: Sequence[int], parts: int) -> list[range]:
    """Contiguous runs of datum indices, one per part, of about equal token counts (every part gets
    a datum when there are enough; the last ones are empty when there are fewer datums than parts)."""
    cumulative = list(itertools.accumulate(lengths_D))
    total, count = (cumulative[-1] if cumulative else 0), len(lengths_D)
    bounds = [0]
    for k in range(1, parts):
        cut = bisect.bisect_left(cumulative, total * k / parts) + 1
        low, high = bounds[-1] + 1, count - (parts - k)
        bounds.append(min(max(cut, low), high) if low <= high else min(max(cut, bounds[-1]), count))
    bounds.append(count)
    return [range(bounds[i], bounds[i + 1]) for i in range(parts)]


def ensure_ray(address: str | None) -> Any:
    """`ray`, initialised: on this machine by default, else joining the cluster at `address`."""
    try:
        import ray
    except ImportError:
        raise ConfigError("local.num_workers > 1 needs Ray: pip install 'kitchen[distributed]'") from None
    if not ray.is_initialized():
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            runtime_env=worker_runtime_env(),
        )
    return ray


def worker_runtime_env() -> dict[str, Any]:
    """The workers import kitchen from where the driver does (a checkout ahead of the installed
    copy included); on a cluster, every node needs kitchen installed (or this path)."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


class DistributedTrainingClient:
    """The TrainingClient port on `options.num_workers` FSDP2 workers (Ray actors)."""

    def __init__(
        self,
        sampler_model: torch.nn.Module,
        tokenizer: Tokenizer,
        identity: ModelIdentity,
        checkpoint_dir: Path,
        sampling_executor: SerialExecutor,
        seeds: random.Random,
        dtype: torch.dtype,
        options: DistributedOptions,
        batch_limits: BatchLimits = DEFAULT_BATCH_LIMITS,
        training: TrainingOptions | None = None,
        lora: LoraOptions | None = None,
    ) -> None:
        self._ray = ray = ensure_ray(options.ray_address)
        self._options = options
        self._training = training or TrainingOptions()
        self._model = sampler_model.eval()  # never trained: the workers hold the trained copy
        self._tokenizer = tokenizer
        self._identity = identity
        self._checkpoint_dir = checkpoint_dir
        self._sampling_executor = sampling_executor
        self._seeds = seeds
        self._batch_limits = batch_limits
        self._executor = SerialExecutor("local-distributed")
        self._pad_id = pad_token_id(tokenizer)
        self._vocab_size = vocab_size(sampler_model)
        self._samplers = SamplerPool(sampler_model)
        self._weights_version = 0
        self._sampler_version = 0  # the weights version the driver's model holds
        self._last_state: tuple[int, Path] | None = None
        self._broken: str | None = None
        use_cuda = next(sampler_model.parameters()).device.type == "cuda"
        resources = {"num_gpus": 1, "num_cpus": 1} if use_cuda else {"num_cpus": 0}
        actor = ray.remote(**resources)(TrainingWorker)
        fault = os.environ.get(FAULT_ENV)
        self._workers = [
            actor.options(name=None).remote(
                rank,
                options.num_workers,
                identity,
                dtype,
                use_cuda,
                self._training,
                lora or LoraOptions(),
                options.cpu_threads,
                fault,
            )
            for rank in range(options.num_workers)
        ]
        address = self._get([self._workers[0].address.remote()], "start-up")[0]
        self._call("start-up", lambda w, rank: w.setup.remote(address, options.timeout_s))

    def get_tokenizer(self) -> Tokenizer:
        return self._tokenizer

    # -- calling the workers -------------------------------------------------------------------

    def _call(self, call: str, method: Callable[[Any, int], Any]) -> list[Any]:
        """`method(worker, rank)` on every worker; their results in rank order."""
        if self._broken is not None:
            raise WorkerFailure(f"the distributed training client is down ({self._broken}); resume from a checkpoint")
        return self._get([method(worker, rank) for rank, worker in enumerate(self._workers)], call)

    def _get(self, refs: list[Any], call: str) -> list[Any]:
        ray = self._ray
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        deadline = time.monotonic() + self._options.timeout_s
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                ranks = sorted(rank_of[ref] for ref in pending)
                self._fail(f"worker(s) {ranks} did not finish {call} within {self._options.timeout_s:g} s")
            for ref in ready:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    self._fail(f"worker {rank_of[ref]} died during {call} ({type(exc).__name__})")
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause if isinstance(exc.cause, Exception) else exc
                    if isinstance(cause, KitchenError):
                        raise cause from None  # bad input, found on a worker: the client stays usable
                    self._fail(f"worker {rank_of[ref]} failed during {call}: {type(cause).__name__}: {cause}")
        return [ray.get(ref) for ref in refs]

    def _fail(self, reason: str) -> None:
        self._broken = reason
        for worker in self._workers:
            self._ray.kill(worker)
        raise WorkerFailure(f"distributed training: {reason}")

    # -- forward / backward ------------------------------------------------------------------

    async def forward(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None = None
    ) -> asyncio.Future[ForwardBackwardOutput]:
        """Logprobs and loss without gradients."""
        job = self._loss_job("forward", data, loss_fn, loss_fn_config, backward=False)
        return self._executor.submit(job)

    async def forward_backward(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None = None
    ) -> asyncio.Future[ForwardBackwardOutput]:
        """Logprobs and loss; the loss's gradients are added to those already accumulated."""
        job = self._loss_job("forward_backward", data, loss_fn, loss_fn_config, backward=True)
        return self._executor.submit(job)

    def _loss_job(
        self, call: str, data: Sequence[Datum], loss_fn: str, loss_fn_config: dict[str, float] | None, backward: bool
    ) -> Callable[[], ForwardBackwardOutput]:
        spec = get_loss_fn(loss_fn)
        config = spec.resolve_config(loss_fn_config)
        user = f"loss {spec.name!r}"
        # validated here, where the call is made (the workers build their own batches)
        build_training_batch(
            data, spec.required_inputs, user, spec.input_keys, self._pad_id, self._vocab_size, torch.device("cpu")
        )
        data = list(data)
        lengths = [d.model_input.length for d in data]
        shards = split_by_tokens(lengths, len(self._workers))
        limit = self._training.max_tokens_per_microbatch
        passes = max(len(microbatches([lengths[i] for i in s], limit)) if len(s) else 0 for s in shards)

        def job() -> ForwardBackwardOutput:
            results = self._call(
                call,
                lambda w, rank: w.run_loss.remote(
                    call, spec.name, config, [data[i] for i in shards[rank]], data[0], passes, backward
                ),
            )
            outputs = [{"logprobs": TensorData.from_torch(lp)} for logprobs, *_ in results for lp in logprobs]
            padded = sum(r[2] for r in results)
            real = sum(r[3] for r in results)
            metrics = {"loss:sum": sum(r[1] for r in results), "padding_fraction": 1.0 - real / max(padded, 1)}
            return ForwardBackwardOutput(outputs, metrics)

        return job

    async def forward_backward_custom(
        self, data: Sequence[Datum], loss_fn: CustomLossFn
    ) -> asyncio.Future[ForwardBackwardOutput]:
        """One forward pass; `loss_fn(data, logprobs_D)` is differentiated straight through (on
        rank 0, over the whole batch: a custom loss may couple datums)."""
        build_training_batch(
            data, (TARGET_TOKENS,), "forward_backward_custom", (), self._pad_id, self._vocab_size, torch.device("cpu")
        )
        data = list(data)

        def job() -> ForwardBackwardOutput:
            results = self._call(
                "forward_backward_custom",
                lambda w, rank: w.run_custom.remote(
                    data if rank == 0 else None, loss_fn if rank == 0 else None, data[0]
                ),
            )
            logprobs_D, metrics = results[0]
            return ForwardBackwardOutput([{"logprobs": TensorData.from_torch(lp)} for lp in logprobs_D], metrics)

        return self._executor.submit(job)

    # -- optimizer ---------------------------------------------------------------------------

    async def optim_step(self, adam_params: AdamParams) -> asyncio.Future[OptimStepOutput]:
        """One AdamW step on every worker's shard of the accumulated gradients."""
        _check_adam(adam_params)

        def job() -> OptimStepOutput:
            metrics = self._call("optim_step", lambda w, rank: w.optim_step.remote(adam_params))[0]
            if "nonfinite_step" not in metrics:
                self._weights_version += 1
            return OptimStepOutput(metrics)

        return self._executor.submit(job)

    # -- checkpoints -------------------------------------------------------------------------

    async def save_state(self, name: str) -> asyncio.Future[str]:
        """Weights, optimizer state and metadata under `<checkpoint_dir>/weights/<name>`, gathered
        to full tensors (the single-process format)."""
        path = checkpoint_path(self._checkpoint_dir, "state", name)
        return self._executor.submit(lambda: self._save(path, "state"))

    async def save_weights_for_sampler(self, name: str) -> asyncio.Future[str]:
        """Weights and metadata under `<checkpoint_dir>/sampler_weights/<name>`; the driver's
        sampler model gets them too."""
        path = checkpoint_path(self._checkpoint_dir, "sampler", name)
        return self._executor.submit(lambda: self._save(path, "sampler"))

    def _gather_weights(self) -> dict[str, torch.Tensor]:
        weights: dict[str, torch.Tensor] = self._call("save", lambda w, rank: w.gather_weights.remote())[0]
        copy_weights(weights, self._model, "gathered weights")
        self._sampler_version = self._weights_version
        return weights

    def _save(self, path: Path, kind: CheckpointKind) -> str:
        same = None
        if kind == "sampler" and self._last_state is not None and self._last_state[0] == self._weights_version:
            same = self._last_state[1]
        optimizer = None
        if kind == "state":
            optimizer = self._call("save_state", lambda w, rank: w.gather_optimizer.remote())[0]
        gathered: list[dict[str, torch.Tensor]] = []

        def weights() -> dict[str, torch.Tensor]:
            if not gathered:
                gathered.append(self._gather_weights())
            return gathered[0]

        if kind == "sampler" and self._sampler_version != self._weights_version:
            weights()  # the sampler model follows the workers, even when the file is linked
        saved = write_checkpoint(path, weights, self._identity, kind, optimizer, same_weights_as=same)
        if kind == "state":
            self._last_state = (self._weights_version, saved)
        return str(saved)

    async def load_state(self, path: str, with_optimizer: bool = True) -> asyncio.Future[None]:
        """Replace every worker's shards (and optimizer state, else reset it) with a checkpoint's."""
        checkpoint = Path(path)
        require_same_model(checkpoint, self._identity)
        return self._executor.submit(lambda: self.restore(checkpoint, with_optimizer))

    def restore(self, path: Path, with_optimizer: bool) -> None:
        """Load a checkpoint into the workers (and the driver's sampler model) now."""
        weights = read_weights(path)
        copy_weights(weights, self._model, path)  # checks that the names fit, before the workers see them
        optimizer = read_optimizer(path) if with_optimizer else None
        weights_ref = self._ray.put(weights)
        optimizer_ref = self._ray.put(optimizer)
        self._call("load_state", lambda w, rank: w.load.remote(weights_ref, optimizer_ref))
        self._weights_version += 1
        self._sampler_version = self._weights_version

    async def save_weights_and_get_sampling_client(self, name: str | None = None) -> LocalSamplingClient:
        """A sampling client on a snapshot of the current weights (after all queued work)."""
        if name is not None:
            await (await self.save_weights_for_sampler(name))

        def snapshot() -> Any:
            if self._sampler_version != self._weights_version:
                self._gather_weights()
            return self._samplers.snapshot()

        lease = await self._executor.submit(snapshot)
        seed = self._seeds.getrandbits(63)
        return LocalSamplingClient(lease, self._tokenizer, self._sampling_executor, seed, self._batch_limits)

    async def close(self) -> None:
        """Finish queued jobs, then stop the workers."""

        def stop() -> None:
            if self._broken is None:
                with contextlib.suppress(Exception):  # they are killed next either way
                    self._ray.get([w.close.remote() for w in self._workers], timeout=30)
            for worker in self._workers:
                self._ray.kill(worker)

        await asyncio.to_thread(self._executor.shutdown)
        await asyncio.to_thread(stop)
