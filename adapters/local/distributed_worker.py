"""One training worker of the distributed local backend: a shard of the model under FSDP2.

`WorkerGroup` (distributed.py) starts N of these as Ray actors; they join one `torch.distributed`
process group (gloo on the cpu, NCCL on GPUs) once, then build a model for each training client
that uses the group (a pooled group serves one client after another). Every call runs on all of
them at once, in the same order (FSDP's all-gathers and reduce-scatters are collectives: every
rank must run the same number of forward and backward passes, so a worker with fewer datums, or
fewer micro-batches, than the others runs zero-weighted passes on a stand-in datum).

What is sharded: every trainable and frozen parameter, per decoder layer and at the root (FSDP2
`fully_shard`, dim 0), and so the AdamW moments; LoRA adapters are sharded like the rest.
Gradients are summed across workers, not averaged (gradient divide factor 1): the losses are sums
over tokens, so the sum of the workers' gradients is the single-process gradient.

Mixed precision (`local.dtype` bfloat16 or float16) is FSDP2's own: the shards are float32 (the
master weights, and so AdamW's moments), each layer's parameters are gathered in the low
precision for its forward and backward, and gradients are reduced in float32
(`MixedPrecisionPolicy`). Every decision a step takes (skip it for a NaN loss, or for a float16
overflow) is all-reduced among the workers on the tensor that is then read, so all take it alike.

This module does not import Ray (the driver wraps the class in `ray.remote`).
"""

from __future__ import annotations

import gc
import os
import random
import socket
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from adapters.common.tokenizer import load_tokenizer
from adapters.local.checkpoint_io import ModelIdentity, load_keeping_kernel, trainable_parameters
from adapters.local.mixed_precision import is_low_precision, set_compute_dtype
from adapters.local.model_loading import LoraOptions, load_model
from adapters.local.serial_executor import SerialExecutor
from adapters.local.training_client import LocalTrainingClient, TrainingOptions, make_adamw, microbatches
from kitchen.engine.errors import ConfigError
from train_core.losses import TARGET_TOKENS, LossSpec, merge_loss_metrics
from train_core.types import AdamParams, Datum

FAULT_ENV = "KITCHEN_DIST_FAULT"
"""Testing hook: `RANK:CALL:N` makes worker RANK exit hard at its Nth CALL (e.g. `1:forward_backward:3`);
`RANK:CALL:N:hang` makes it stop there instead (sleeping, so that a test can take its node away mid-call)."""


def shard_model(model: torch.nn.Module, compute: torch.dtype = torch.float32) -> None:
    """`fully_shard` each decoder layer (every child of a ModuleList named `layers`), then the root;
    a `compute` dtype below the parameters' float32 is FSDP2's mixed precision (float32 shards and
    gradient reductions, `compute` for the gathered parameters)."""
    policy = MixedPrecisionPolicy()
    if is_low_precision(compute):
        policy = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32)
        set_compute_dtype(model, compute)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] == "layers":
            for layer in module:
                fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)  # sum the workers' gradients: losses are sums
            module.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM


def agree_any(flags: list[bool], device: torch.device) -> list[bool]:
    """Each flag, true when it is true on any worker. The all-reduce runs on a tensor made on
    `device` (NCCL reduces CUDA tensors only) and that same tensor is read back: a reduced copy
    (`tensor.to(device)` of a cpu tensor) would leave the value read unchanged on CUDA."""
    reduced = torch.tensor([float(flag) for flag in flags], device=device)
    dist.all_reduce(reduced, op=dist.ReduceOp.MAX)
    return [value > 0 for value in reduced.tolist()]


class _ShardedCore(LocalTrainingClient):
    """The local training client's step on a sharded model: its skip decisions (a NaN loss, a
    float16 overflow) are agreed across workers so that all take (or skip) the same step; the
    gradient norm of sharded gradients is a global one already."""

    def _agreed(self, nonfinite: bool, overflow: bool) -> tuple[bool, bool]:
        nonfinite, overflow = agree_any([nonfinite, overflow], self._device)
        return nonfinite, overflow


def _full(value: Any) -> Any:
    return value.full_tensor().cpu() if isinstance(value, DTensor) else value


class TrainingWorker:
    """Rank `rank` of `world_size`; methods are called on every worker with the same arguments
    (except each worker's own share of the data)."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        dtype: torch.dtype,
        use_cuda: bool,
        training: TrainingOptions,
        lora: LoraOptions,
        cpu_threads: int | None,
        fault: str | None,
        node: str,
    ) -> None:
        if cpu_threads is not None:
            torch.set_num_threads(cpu_threads)
        self.rank = rank
        self.world_size = world_size
        self._node = node  # its address, as Ray reports it: for error messages
        self._dtype = dtype
        self._device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
        self._training = training
        self._lora = lora
        self._calls: dict[str, int] = {}
        self._fault = fault.split(":") if fault else None
        self._core: _ShardedCore | None = None
        self._pending: list[torch.Tensor] = []  # a custom loss's logprobs, awaiting their gradients

    def address(self, host: str) -> str:
        """A `tcp://host:port` rendezvous on this worker's node (asked of rank 0), `host` being the
        node's address as Ray reports it: the hostname's may resolve to 127.0.1.1, or to nothing
        the other nodes can reach."""
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
        return f"tcp://{host}:{port}"

    def join(self, init_method: str, timeout_s: float) -> None:
        """Join the process group (once: it outlives the models built on it)."""
        backend = "nccl" if self._device.type == "cuda" else "gloo"
        if self._device.type == "cuda":
            torch.cuda.set_device(self._device)
        dist.init_process_group(
            backend,
            init_method=init_method,
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=timeout_s),
        )

    def find_model(self, identity: ModelIdentity, driver_folder: str | None) -> None:
        """A ConfigError unless this node has the model's folder, when it is one (`driver_folder`:
        its absolute path on the driver's machine; a cluster shares no disk by itself). Asked of
        every worker before `build`, whose sharding is collective: a worker that failed there
        would leave the others waiting in it."""
        if driver_folder is not None and not Path(driver_folder).is_dir():
            raise ConfigError(
                f"model_name {identity.base_model!r}: the folder {driver_folder} is on the driver's machine but "
                f"not on node {self._node} (training worker {self.rank}): on a cluster, put the model at the same "
                "path on every node (a shared or synced disk), or name a hub model every node can download"
            )

    def build(self, identity: ModelIdentity, driver_folder: str | None) -> None:
        """Load `identity`'s base weights (from `driver_folder` when the model is a folder: see
        `find_model`), shard them and start a fresh optimizer (and fresh call counts for the fault
        hook): the state of a new training client."""
        self.release()
        source = driver_folder or identity.base_model
        stored = torch.float32 if is_low_precision(self._dtype) else self._dtype  # the masters' dtype
        model = load_model(source, identity.lora_rank, identity.seed, self._device, stored, self._lora, identity.layers)
        shard_model(model, self._dtype)
        tokenizer = load_tokenizer(source)
        self._calls = {}
        self._core = _ShardedCore(
            model,
            tokenizer,
            identity,
            Path(os.devnull),
            SerialExecutor("unused"),
            random.Random(0),
            options=self._training,
        )

    def release(self) -> None:
        """Drop the model and optimizer (the group waits idle in its pool, holding no weights)."""
        if self._core is None:
            return
        self._core = None
        self._pending = []
        gc.collect()  # FSDP's hooks keep the sharded model in reference cycles
        gc.freeze()  # what is left lives as long as the process: later collections skip it (~0.5 s)
        if self._device.type == "cuda":
            torch.cuda.empty_cache()

    @property
    def core(self) -> _ShardedCore:
        assert self._core is not None, "build() first"
        return self._core

    def _count(self, call: str) -> None:
        self._calls[call] = n = self._calls.get(call, 0) + 1
        fault = self._fault
        if fault is not None and (int(fault[0]), fault[1], int(fault[2])) == (self.rank, call, n):
            if fault[3:] == ["hang"]:
                time.sleep(3600.0)  # until the test takes the node away, or the call times out
            os._exit(17)

    # -- forward / backward ------------------------------------------------------------------

    def run_loss(
        self,
        call: str,
        spec: LossSpec,
        config: dict[str, float],
        data: list[Datum],
        stand_in: Datum,
        passes: int,
        backward: bool,
    ) -> tuple[list[torch.Tensor], dict[str, float], int, int]:
        """This worker's datums through a built-in loss (its spec comes with the call: the driver
        holds the loss table, plugins' included), in `passes` micro-batches (zero-weighted
        passes on `stand_in` where it has fewer): (logprobs per datum, loss metrics, token slots
        run, slots holding a token)."""
        self._count(call)
        core = self.core
        user = f"loss {spec.name!r}"
        outputs: list[torch.Tensor] = [torch.empty(0)] * len(data)
        groups = (
            microbatches([d.model_input.length for d in data], core._options.max_tokens_per_microbatch) if data else []
        )
        part_metrics: list[dict[str, float]] = []
        slots = filled = 0
        with core._training_mode(backward):
            for index in range(passes):
                if index >= len(groups):
                    self._stand_in_pass(stand_in, backward)
                    continue
                group = groups[index]
                batch = core._batch([data[i] for i in group], spec.required_inputs, user, spec.input_keys)
                scored, metrics = core._loss_pass(spec, batch, config, backward)
                part_metrics.append(metrics)
                slots, filled = slots + scored.slots, filled + scored.filled
                for i, logprobs in zip(group, scored.logprobs_D, strict=True):
                    outputs[i] = logprobs.detach().float().cpu()
        return outputs, merge_loss_metrics(part_metrics), slots, filled

    def _stand_in_pass(self, stand_in: Datum, backward: bool) -> None:
        """A pass that moves nothing: it only takes part in the other workers' collectives."""
        with torch.set_grad_enabled(backward):
            logprobs = self._stand_in_logprobs(stand_in)
        if backward:
            (logprobs.sum() * 0.0).backward()

    def _stand_in_logprobs(self, stand_in: Datum) -> torch.Tensor:
        core = self.core
        return torch.cat(core._score(core._batch([stand_in], (TARGET_TOKENS,), "stand-in", ())).logprobs_D)

    def custom_forward(self, data: list[Datum], stand_in: Datum) -> list[torch.Tensor]:
        """This worker's share of a custom loss's datums, forward with gradients (a stand-in pass
        when it has none): their logprobs, for the driver to run the loss on. The graph is kept
        for `custom_backward`, which must be the next call."""
        self._count("forward_backward_custom")
        core = self.core
        with core._training_mode(backward=True):
            if data:
                self._pending = core._score(core._batch(data, (TARGET_TOKENS,), "custom", ())).logprobs_D
            else:
                self._pending = [self._stand_in_logprobs(stand_in)]
        return [lp.detach().float().cpu() for lp in self._pending] if data else []

    def custom_backward(self, grads_D: list[torch.Tensor] | None, nonfinite: bool) -> None:
        """Backward of sum(grad * logprob) over the datums of `custom_forward`, given each one's
        d(loss)/d(logprobs) from the driver: by the chain rule, this worker's part of the loss's
        gradient. None or no datums (a stand-in, or a loss that failed): a zero-weighted pass."""
        logprobs_D, self._pending = self._pending, []
        if grads_D:
            pairs = zip(grads_D, logprobs_D, strict=True)
            surrogate = torch.stack([(g.to(lp.device, lp.dtype) * lp).sum() for g, lp in pairs]).sum()
        else:
            surrogate = torch.cat(logprobs_D).sum() * 0.0
        with self.core._training_mode(backward=True):  # checkpointed layers recompute in the forward's mode
            surrogate.backward()
        self.core._nonfinite_loss |= nonfinite

    def optim_step(self, adam: AdamParams) -> dict[str, float]:
        self._count("optim_step")
        return self.core._step(adam).metrics

    # -- state ---------------------------------------------------------------------------------

    def gather_weights(self) -> dict[str, torch.Tensor] | None:
        """The full trainable weights on rank 0 (cpu); None elsewhere. A collective."""
        self._count("gather_weights")
        self._reshard()
        full = {name: _full(p.detach()).contiguous() for name, p in trainable_parameters(self.core._model).items()}
        return full if self.rank == 0 else None

    def gather_optimizer(self) -> dict[str, Any] | None:
        """The optimizer state dict with full tensors, in the single-process format, on rank 0."""
        self._count("gather_optimizer")
        state = self.core._optimizer.state_dict()
        full_state = {key: {name: _full(v) for name, v in entry.items()} for key, entry in state["state"].items()}
        return {"state": full_state, "param_groups": state["param_groups"]} if self.rank == 0 else None

    def _reshard(self) -> None:
        """Put every module's parameters back to their float32 shards: the root keeps them gathered
        (in the compute dtype) after a forward that no backward followed."""
        for module in self.core._model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()

    def load(self, weights: dict[str, torch.Tensor], optimizer: dict[str, Any] | None) -> None:
        """Full weights (and optimizer state, else a fresh optimizer) into this worker's shards."""
        self._count("load")
        self._reshard()
        core = self.core
        params = trainable_parameters(core._model)
        if weights.keys() != params.keys():
            raise ValueError(f"weights do not fit this model ({len(weights)} tensors for {len(params)} parameters)")
        with torch.no_grad():
            for name, param in params.items():
                param.copy_(self._like(param, weights[name]))
        core._optimizer = make_adamw(core._params)
        if optimizer is None:
            return
        state = {
            key: {name: self._like(core._params[int(key)], v) if v.dim() > 0 else v for name, v in entry.items()}
            for key, entry in optimizer["state"].items()
        }
        load_keeping_kernel(core._optimizer, {"state": state, "param_groups": optimizer["param_groups"]})

    def _like(self, param: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
        """`full` placed as `param` is: this worker's shard of it, on its device, in its dtype (a
        checkpoint of low-precision weights or moments loads as their float32 values)."""
        full = full.to(device=self._device, dtype=param.dtype)
        if isinstance(param, DTensor):
            return distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)  # no comms
        return full

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
