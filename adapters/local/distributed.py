"""TrainingClient over N Ray actors holding FSDP2 shards of the model (`local.num_workers > 1`).

The driver (this process, where the runner lives) keeps what the single-process client keeps but
the trained model: the tokenizer, the checkpoint bookkeeping and a full copy of the model for the
sampler. Every call validates its arguments here at once, then queues a job on the client's own
worker thread (so jobs run strictly in submission order, and submitting returns at once); a job
calls every worker and waits for all of them, with a timeout.

- Built-in losses: the batch is cut into N contiguous runs of datums with about the same token
  count, one per worker; logprobs come back in datum order, the loss metrics (`loss:sum`, clip
  counts) are the sums of the workers'.
  Losses are sums over tokens and FSDP sums (not averages) the gradients, so the gradient is the
  single-process one.
- Custom losses (DPO) may couple datums, so they run in the driver: the workers forward their
  runs of datums (as above), the driver runs the loss on all the logprobs, in datum order, and
  sends each datum's d(loss)/d(logprobs) back; the workers backward sum(grad * logprobs), which
  by the chain rule gives the single-process gradient.
- Checkpoints: rank 0 gathers full tensors (weights, and the optimizer state in the single-process
  format) and the driver writes them with `checkpoint_io`, so they do not depend on the worker
  count. Loading sends the full tensors to every worker, which keeps its shard.
- Sampling: `save_weights_for_sampler` and `save_weights_and_get_sampling_client` gather the
  weights into the driver's model, which the sampler pool snapshots as in the single-process case
  (or the vLLM engine reads, with no snapshot).
- Faults: a worker that dies (its node lost included) or does not answer within `timeout_s` fails
  the call with a `RuntimeFailure` naming the worker, its node and the call; the other workers are
  killed (they may wait in a collective) and the client is unusable after that; resume from the
  last checkpoint (on whatever nodes are left: the placement's SPREAD is a preference).
- Rendezvous: rank 0's process group listens on the address Ray reports for its node (not what
  the node's hostname resolves to, often 127.0.1.1 or nothing useful on a cluster).
- Pooling: starting a group of workers (processes, imports, the process group) takes seconds, so
  a closed client's group goes back to its `WorkerPool`, and the next client of the same shape
  rebuilds its model on it from the base weights; the pool stops its groups when it is closed.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import os
import queue
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from adapters.common.tiny import EMBEDDED_MODELS
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
from adapters.local.training_client import (
    SamplerFactory,
    TrainingOptions,
    _check_adam,
    backward_custom_loss,
    microbatches,
)
from kitchen.engine.errors import ConfigError, KitchenError, RuntimeFailure
from kitchen.engine.ports import CustomLossFn, SamplingClient, Tokenizer
from train_core.losses import LOSS_SPECS, TARGET_TOKENS, LossTable, find_loss, merge_loss_metrics
from train_core.types import AdamParams, Datum, ForwardBackwardOutput, OptimStepOutput, TensorData


class WorkerFailure(RuntimeFailure):
    """A training worker died (or its node was lost) or timed out; the message names it, its node
    and the call."""


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


_RAY_INIT = threading.Lock()


def ensure_ray(address: str | None) -> Any:
    """`ray`, initialised: on this machine by default, else joining the cluster at `address`."""
    try:
        import ray
    except ImportError:
        raise ConfigError("local.num_workers > 1 needs Ray: pip install 'kitchen[distributed]'") from None
    with _RAY_INIT:  # clients may be made on several threads at once
        if not ray.is_initialized():
            _on_lasting_thread(
                lambda: ray.init(
                    address=address,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                    runtime_env=worker_runtime_env(address),
                )
            )
    return ray


def _on_lasting_thread(start: Callable[[], object]) -> None:
    """`start()` on a thread that lives as long as this process. Ray ties the processes it starts
    (its GCS, the raylet) to the thread that starts them (PR_SET_PDEATHSIG on Linux), and clients
    are made on short-lived threads: asyncio.to_thread's end with their `asyncio.run`, and Ray
    would die with them while a pool still holds its workers."""
    if threading.current_thread() is threading.main_thread():
        start()
        return
    outcome: queue.Queue[BaseException | None] = queue.Queue()

    def run() -> None:
        try:
            start()
        except BaseException as exc:
            outcome.put(exc)
            return
        outcome.put(None)
        threading.Event().wait()  # never set: the thread stays, so what it started does too

    threading.Thread(target=run, name="ray-init", daemon=True).start()
    error = outcome.get()
    if error is not None:
        raise error


SHIPPED_PACKAGES = ("adapters", "kitchen", "train_core")
"""What a training worker imports of kitchen's own code (the worker class, the engine's errors and
ports, the losses): the packages Ray ships to a cluster's nodes."""


def worker_runtime_env(address: str | None) -> dict[str, Any]:
    """The workers run the driver's kitchen code. On this machine (`address` None) they import it
    from where the driver does (a checkout ahead of the installed copy included); on a cluster,
    Ray ships kitchen's packages from the driver to every node (`py_modules`), so nodes need only
    kitchen's dependencies installed, not kitchen, the checkout or a shared disk. Third-party
    plugins (a loss's module) must be installed on every node."""
    root = Path(__file__).resolve().parents[2]
    if address is not None:
        return {"py_modules": [str(root / name) for name in SHIPPED_PACKAGES], "excludes": ["__pycache__"]}
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


CPU_WORKER_SHARE = 0.001
"""Ray CPUs a CPU worker reserves: next to nothing (its torch threads are `local.cpu_threads`), but
a placement group's bundle needs some resource to be placed by."""


def bundle_nodes(ray: Any, group: Any) -> list[tuple[str, str]]:
    """(Ray's node id, the node's address as Ray reports it) of each bundle of a placed group, in
    bundle order."""
    addresses = {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()}
    on = ray.util.placement_group_table(group)["bundles_to_node_id"]
    return [(on[index], addresses.get(on[index], on[index])) for index in range(len(on))]


HEAD_ANSWER_S = 10.0
"""How long the driver waits for the cluster's head (Ray's GCS) to answer after a failure before it
takes the head for lost (Ray's own calls would wait 60 s for it, then end the process)."""
PEER_VERDICT_S = 15.0
"""How long a worker's failure waits for Ray to report another worker dead (a lost node's actors
are declared dead some seconds after its raylet stops), to name the dead one as the cause."""


def within(seconds: float, call: Callable[[], Any]) -> tuple[bool, Any]:
    """(True, `call()`) when it returns within `seconds`, else (False, None): `call` runs on a daemon
    thread, which a call waiting on a lost head leaves blocked inside Ray."""
    outcome: queue.Queue[tuple[bool, Any]] = queue.Queue()

    def run() -> None:
        try:
            outcome.put((True, call()))
        except BaseException as exc:
            outcome.put((False, exc))

    threading.Thread(target=run, name="ray-head-query", daemon=True).start()
    try:
        finished, value = outcome.get(timeout=seconds)
    except queue.Empty:
        return False, None
    if not finished:
        raise value
    return True, value


def spread_placement(ray: Any, size: int, use_cuda: bool, timeout_s: float) -> Any:
    """A placement group of one bundle per worker with the SPREAD strategy: on a cluster with as
    many nodes as workers, one worker per node; with fewer, they share (a preference, not a
    constraint). Ray's per-actor SPREAD strategy left both workers on one node of two in a test."""
    bundle = {"GPU": 1.0, "CPU": 1.0} if use_cuda else {"CPU": CPU_WORKER_SHARE}
    group = ray.util.placement_group([bundle] * size, strategy="SPREAD")
    if not group.wait(timeout_seconds=timeout_s):
        ray.util.remove_placement_group(group)
        raise WorkerFailure(
            f"distributed training: Ray could not place {size} workers ({bundle} each) within {timeout_s:g} s; "
            "the cluster's free resources: " + str(ray.available_resources())
        )
    return group


@dataclass(frozen=True)
class WorkerShape:
    """What a worker group is started with: groups of one shape serve any model interchangeably."""

    options: DistributedOptions
    dtype: torch.dtype
    use_cuda: bool
    training: TrainingOptions
    lora: LoraOptions
    fault: str | None
    """The `FAULT_ENV` testing hook, read when the client is made."""


class WorkerGroup:
    """`shape.options.num_workers` training workers (Ray actors) in one process group; every call
    goes to all of them. A call that fails on a worker (not for bad input) breaks the group."""

    def __init__(self, shape: WorkerShape) -> None:
        self.shape = shape
        self._ray = ray = ensure_ray(shape.options.ray_address)
        self.broken: str | None = None
        self._stopped = False
        size = shape.options.num_workers
        self._placement = spread_placement(ray, size, shape.use_cuda, shape.options.timeout_s)
        self._node_ids, self.nodes = zip(*bundle_nodes(ray, self._placement), strict=True)
        self.head_lost = False
        """The cluster's head stopped answering: nothing more can be asked of Ray (stop included)."""
        resources = {"num_gpus": 1, "num_cpus": 1} if shape.use_cuda else {"num_cpus": CPU_WORKER_SHARE}
        actor = ray.remote(**resources)(TrainingWorker)
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # Ray is optional

        self._workers = [
            actor.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(self._placement, placement_group_bundle_index=rank)
            ).remote(
                rank,
                size,
                shape.dtype,
                shape.use_cuda,
                shape.training,
                shape.lora,
                shape.options.cpu_threads,
                shape.fault,
                self.nodes[rank],
            )
            for rank in range(size)
        ]
        address = self._get([self._workers[0].address.remote(self.nodes[0])], "start-up")[0]
        self.call("start-up", lambda w, rank: w.join.remote(address, shape.options.timeout_s))

    @property
    def size(self) -> int:
        return len(self._workers)

    def put(self, value: Any) -> Any:
        """A reference to `value` in Ray's object store: passed to every worker, sent once."""
        return self._ray.put(value)

    def call(self, call: str, method: Callable[[Any, int], Any]) -> list[Any]:
        """`method(worker, rank)` on every worker; their results in rank order."""
        if self.broken is not None:
            raise WorkerFailure(f"the distributed training client is down ({self.broken}); resume from a checkpoint")
        return self._get([method(worker, rank) for rank, worker in enumerate(self._workers)], call)

    def _get(self, refs: list[Any], call: str) -> list[Any]:
        ray = self._ray
        timeout_s = self.shape.options.timeout_s
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        deadline = time.monotonic() + timeout_s
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                ranks = sorted(rank_of[ref] for ref in pending)
                on = ", ".join(f"{rank} on node {self.nodes[rank]}" for rank in ranks)
                self._fail(f"worker(s) {on} did not finish {call} within {timeout_s:g} s")
            for ref in ready:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    rank = rank_of[ref]
                    self._fail(
                        f"worker {rank} died during {call} on node {self.nodes[rank]}{self._node_state(rank)} "
                        f"({type(exc).__name__})"
                    )
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause if isinstance(exc.cause, Exception) else exc
                    if isinstance(cause, KitchenError):
                        raise cause from None  # bad input, found on a worker: the group stays usable
                    rank = rank_of[ref]
                    failed = f"worker {rank} failed during {call} on node {self.nodes[rank]}: "
                    failed += f"{type(cause).__name__}: {cause}"
                    self._fail(self._dead_peer(pending, rank_of, call, failed) or failed)
        return [ray.get(ref) for ref in refs]

    def _dead_peer(self, pending: list[Any], rank_of: dict[Any, int], call: str, failed: str) -> str | None:
        """A worker whose collective lost its peer (gloo's "connection closed by peer") fails
        before Ray reports the peer dead: the dead peer is the cause to name. The first of
        `pending` Ray reports dead within `PEER_VERDICT_S`, as the failure's message; None when
        every other worker is alive."""
        ray = self._ray
        ready, _ = ray.wait(pending, num_returns=len(pending), timeout=PEER_VERDICT_S) if pending else ([], [])
        for ref in ready:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                rank = rank_of[ref]
                return (
                    f"worker {rank} died during {call} on node {self.nodes[rank]}{self._node_state(rank)} "
                    f"({type(exc).__name__}); then {failed}"
                )
            except Exception:
                continue
        return None

    def _node_state(self, rank: int) -> str:
        """ ", which Ray reports lost" when the rank's node is gone (Ray declares a node dead a few
        seconds after its raylet stops answering: this waits up to 5 s for the verdict); "" when it
        is not, or when the head does not answer (`_fail` says so)."""
        deadline = time.monotonic() + 5.0
        while not self.head_lost and time.monotonic() < deadline:
            alive = self._alive_nodes()
            if alive is None:
                self.head_lost = True
            elif not alive.get(self._node_ids[rank], False):
                return ", which Ray reports lost"
            else:
                time.sleep(0.5)
        return ""

    def _alive_nodes(self) -> dict[str, bool] | None:
        """Whether each node is alive, by Ray's node id; None when the cluster's head (Ray's GCS)
        does not answer within `HEAD_ANSWER_S`."""
        try:
            answered, nodes = within(HEAD_ANSWER_S, self._ray.nodes)
        except Exception:  # Ray's error for a GCS it cannot reach
            return None
        return {node["NodeID"]: node["Alive"] for node in nodes} if answered else None

    def _fail(self, reason: str) -> None:
        """Break the group for `reason`: its workers are killed (they may wait in a collective)."""
        self.broken = reason
        if not self.head_lost:
            self.head_lost = self._alive_nodes() is None
        if not self.head_lost:
            within(HEAD_ANSWER_S, lambda: [self._ray.kill(w) for w in self._workers])
        else:
            address = self.shape.options.ray_address or "this machine"
            reason += (
                f"; the Ray cluster's head ({address}) does not answer either: the driver has lost the cluster "
                "(restart its head and nodes, then rerun the same command to resume)"
            )
        raise WorkerFailure(f"distributed training: {reason}")

    def stop(self) -> None:
        """Leave the process group and end the worker processes (gone already if Ray was shut down);
        a second stop does nothing."""
        if self._stopped or self.head_lost or not self._ray.is_initialized():
            return
        self._stopped = True
        if self.broken is None:
            with contextlib.suppress(Exception):  # they are killed next either way
                self._ray.get([w.close.remote() for w in self._workers], timeout=30)

        def end() -> None:
            for worker in self._workers:
                self._ray.kill(worker)
            self._ray.util.remove_placement_group(self._placement)

        within(HEAD_ANSWER_S, end)  # a head lost since: nothing is left to stop


class WorkerPool:
    """Worker groups kept between training clients: `acquire` reuses an idle group of the same
    shape (or starts one), `release` takes it back, `close` stops them all. One pool may serve
    several backends (as the contract tests' does); a backend made without one owns its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # clients are made on worker threads, possibly at once
        self._idle: dict[WorkerShape, list[WorkerGroup]] = {}
        self._groups: list[WorkerGroup] = []  # idle or in use: stopped when the pool is closed
        self._closed = False

    def acquire(self, shape: WorkerShape, identity: ModelIdentity) -> WorkerGroup:
        """A group of `shape` holding `identity`'s base weights and a fresh optimizer."""
        with self._lock:
            if self._closed:
                raise KitchenError("the distributed workers were already shut down (their backend is closed)")
            idle = self._idle.get(shape)
            group = idle.pop() if idle else None
        if group is None:
            group = WorkerGroup(shape)
            with self._lock:
                self._groups.append(group)
        try:
            folder = Path(identity.base_model)
            local = folder.is_dir() and identity.base_model not in EMBEDDED_MODELS
            on_driver = str(folder.resolve()) if local else None
            group.call("start-up", lambda w, rank: w.find_model.remote(identity, on_driver))
            group.call("start-up", lambda w, rank: w.build.remote(identity, on_driver))
        except BaseException:
            self.release(group)
            raise
        return group

    def release(self, group: WorkerGroup) -> None:
        """Back to the idle groups, its model dropped; a broken group, or any group once the pool
        is closed (its client outlived the backend, or start-up raced `close`), is stopped instead."""
        with self._lock:
            closed = self._closed
        if not closed:
            with contextlib.suppress(WorkerFailure):  # it breaks the group, which is handled below
                group.call("release", lambda w, rank: w.release.remote())
        with self._lock:
            if group.broken is None and not self._closed:
                self._idle.setdefault(group.shape, []).append(group)
                return
            if group in self._groups:
                self._groups.remove(group)
        group.stop()

    def close(self) -> None:
        """Stop every group, idle or not; later releases stop their group."""
        with self._lock:
            groups, self._groups, self._idle, self._closed = self._groups, [], {}, True
        for group in groups:
            group.stop()


class DistributedTrainingClient:
    """The TrainingClient port on `options.num_workers` FSDP2 workers (Ray actors) from `workers`."""

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
        workers: WorkerPool,
        batch_limits: BatchLimits = DEFAULT_BATCH_LIMITS,
        training: TrainingOptions | None = None,
        lora: LoraOptions | None = None,
        make_sampler: SamplerFactory | None = None,
        losses: LossTable = LOSS_SPECS,
    ) -> None:
        self._training = training or TrainingOptions()
        self._losses = losses
        self._make_sampler = make_sampler
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
        use_cuda = next(sampler_model.parameters()).device.type == "cuda"
        shape = WorkerShape(options, dtype, use_cuda, self._training, lora or LoraOptions(), os.environ.get(FAULT_ENV))
        self._pool = workers
        self._group = workers.acquire(shape, identity)
        self._released = False

    def get_tokenizer(self) -> Tokenizer:
        return self._tokenizer

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
        spec = find_loss(self._losses, loss_fn)
        config = spec.resolve_config(loss_fn_config)
        user = f"loss {spec.name!r}"
        # validated here, where the call is made (the workers build their own batches)
        build_training_batch(
            data, spec.required_inputs, user, spec.input_keys, self._pad_id, self._vocab_size, torch.device("cpu")
        )
        data = list(data)
        lengths = [d.model_input.length for d in data]
        shards = split_by_tokens(lengths, self._group.size)
        limit = self._training.max_tokens_per_microbatch
        passes = max(len(microbatches([lengths[i] for i in s], limit)) if len(s) else 0 for s in shards)

        def job() -> ForwardBackwardOutput:
            results = self._group.call(
                call,
                lambda w, rank: w.run_loss.remote(
                    call, spec, config, [data[i] for i in shards[rank]], data[0], passes, backward
                ),
            )
            outputs = [{"logprobs": TensorData.from_torch(lp)} for logprobs, *_ in results for lp in logprobs]
            slots, filled = sum(r[2] for r in results), sum(r[3] for r in results)
            metrics = {
                **merge_loss_metrics([r[1] for r in results]),
                "padding_fraction:mean": 1.0 - filled / max(slots, 1),
            }
            return ForwardBackwardOutput(outputs, metrics)

        return job

    async def forward_backward_custom(
        self, data: Sequence[Datum], loss_fn: CustomLossFn
    ) -> asyncio.Future[ForwardBackwardOutput]:
        """One forward pass on the workers; `loss_fn(data, logprobs_D)` runs here, on the whole
        batch (it may couple datums), and the workers backward its gradient w.r.t. the logprobs."""
        build_training_batch(
            data, (TARGET_TOKENS,), "forward_backward_custom", (), self._pad_id, self._vocab_size, torch.device("cpu")
        )
        data = list(data)
        shards = split_by_tokens([d.model_input.length for d in data], self._group.size)
        call = "forward_backward_custom"

        def job() -> ForwardBackwardOutput:
            results = self._group.call(
                call, lambda w, rank: w.custom_forward.remote([data[i] for i in shards[rank]], data[0])
            )
            logprobs_D = [lp.requires_grad_() for part in results for lp in part]
            try:
                metrics, finite = backward_custom_loss(loss_fn, data, logprobs_D)
            except BaseException:
                self._group.call(call, lambda w, rank: w.custom_backward.remote(None, False))  # free the graphs
                raise
            grads_D = [torch.zeros_like(lp) if lp.grad is None else lp.grad for lp in logprobs_D]
            self._group.call(
                call, lambda w, rank: w.custom_backward.remote([grads_D[i] for i in shards[rank]], not finite)
            )
            return ForwardBackwardOutput(
                [{"logprobs": TensorData.from_torch(lp.detach())} for lp in logprobs_D], metrics
            )

        return self._executor.submit(job)

    # -- optimizer ---------------------------------------------------------------------------

    async def optim_step(self, adam_params: AdamParams) -> asyncio.Future[OptimStepOutput]:
        """One AdamW step on every worker's shard of the accumulated gradients."""
        _check_adam(adam_params)

        def job() -> OptimStepOutput:
            metrics = self._group.call("optim_step", lambda w, rank: w.optim_step.remote(adam_params))[0]
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
        weights: dict[str, torch.Tensor] = self._group.call("save", lambda w, rank: w.gather_weights.remote())[0]
        copy_weights(weights, self._model, "gathered weights")
        self._sampler_version = self._weights_version
        return weights

    def _save(self, path: Path, kind: CheckpointKind) -> str:
        same = None
        if kind == "sampler" and self._last_state is not None and self._last_state[0] == self._weights_version:
            same = self._last_state[1]
        optimizer = None
        if kind == "state":
            optimizer = self._group.call("save_state", lambda w, rank: w.gather_optimizer.remote())[0]
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
        weights_ref, optimizer_ref = self._group.put(weights), self._group.put(optimizer)
        self._group.call("load_state", lambda w, rank: w.load.remote(weights_ref, optimizer_ref))
        self._weights_version += 1
        self._sampler_version = self._weights_version

    async def save_weights_and_get_sampling_client(self, name: str | None = None) -> SamplingClient:
        """A sampling client on a snapshot of the current weights (after all queued work)."""
        if name is not None:
            await (await self.save_weights_for_sampler(name))

        def gathered() -> None:
            if self._sampler_version != self._weights_version:
                self._gather_weights()

        if self._make_sampler is not None:  # the engine reads the gathered weights, right after the gather

            def on_trainer(job: Callable[[], Any]) -> Awaitable[Any]:
                def after_gather() -> Any:
                    gathered()
                    return job()

                return self._executor.submit(after_gather)

            seed = self._seeds.getrandbits(63)
            return await self._make_sampler(self._model, self._identity, self._tokenizer, seed, on_trainer)

        def snapshot() -> Any:
            gathered()
            return self._samplers.snapshot()

        lease = await self._executor.submit(snapshot)
        seed = self._seeds.getrandbits(63)
        return LocalSamplingClient(
            lease, self._tokenizer, self._sampling_executor, seed, self._batch_limits, self._training.logprob_method
        )

    async def close(self) -> None:
        """Finish queued jobs, then give the workers back to the pool (once)."""
        await asyncio.to_thread(self._executor.shutdown)
        if not self._released:
            self._released = True
            await asyncio.to_thread(self._pool.release, self._group)
