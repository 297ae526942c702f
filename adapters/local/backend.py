"""LocalBackend: the ServiceBackend port on torch + transformers, on this machine's CPU or GPU."""

from __future__ import annotations

import asyncio
import random
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from adapters.common.tokenizer import load_tokenizer
from adapters.local.checkpoint_io import ModelIdentity, load_weights, read_identity
from adapters.local.grouped_lora import groupable
from adapters.local.lora_group import LoraGroup
from adapters.local.model_loading import (
    LoraOptions,
    add_lora,
    default_dtype,
    load_base_model,
    load_model,
    resolve_device,
)
from adapters.local.request_batcher import DEFAULT_BATCH_LIMITS, BatchLimits
from adapters.local.sampling_client import LocalSamplingClient
from adapters.local.serial_executor import SerialExecutor
from adapters.local.shared_worker import Lane
from adapters.local.token_scoring import liger_available
from adapters.local.training_client import LocalTrainingClient, TrainingOptions
from adapters.local.vision import is_vision_model
from kitchen.engine.errors import ConfigError
from kitchen.engine.ports import SamplingClient, Tokenizer
from train_core.losses import LOSS_SPECS, LossTable
from train_core.types import LoraLayers

if TYPE_CHECKING:
    from adapters.local.distributed import DistributedOptions, DistributedTrainingClient, WorkerPool
    from adapters.local.vllm_samplers import VllmSamplers
    from adapters.local.vllm_settings import VllmSettings

_DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,  # for exactness tests; not offered as a setting
}


class LocalBackend:
    """Creates training and sampling clients over local models.

    `model_name: "tiny"` is the embedded model (offline, CPU-fast); any other name is a local
    directory or a Hugging Face hub id (read from the HF cache, downloaded where there is network).
    Checkpoints go under `checkpoint_dir`. All sampling clients share one worker thread and each
    training client has its own, so training and sampling overlap without blocking the event loop.
    Sampling clients batch concurrent requests within `batch_limits`. LoRA training clients of one
    base model share its weights and one worker thread, and their forward passes that wait at the
    same time run as one batched pass (`adapters.local.lora_group`), within `batch_limits` too.

    With `vllm` settings, sampling clients are served by vLLM engines (`local.sampler: vllm`) in
    processes of their own, started on first use and stopped by `close`; their files (logs
    included) go to the `vllm/` folder beside `checkpoint_dir`. `lora_rank` is the run's, which
    the engines must be able to serve.
    """

    name = "local"

    def __init__(
        self,
        checkpoint_dir: Path,
        device: str | None = None,
        seed: int = 0,
        dtype: str | None = None,
        batch_limits: BatchLimits = DEFAULT_BATCH_LIMITS,
        training: TrainingOptions | None = None,
        lora: LoraOptions | None = None,
        distributed: DistributedOptions | None = None,
        worker_pool: WorkerPool | None = None,
        vllm: VllmSettings | None = None,
        lora_rank: int | None = None,
        losses: LossTable = LOSS_SPECS,
    ) -> None:
        self._losses = losses
        self.checkpoint_dir = Path(checkpoint_dir)
        self.device = resolve_device(device)
        dtype = dtype or default_dtype(self.device)
        if dtype not in _DTYPES:
            raise ConfigError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
        self._dtype = _DTYPES[dtype]
        self._seeds = random.Random(seed)
        self._sampling_executor = SerialExecutor("local-sampling")
        self._batch_limits = batch_limits
        self._training_options = training or TrainingOptions()
        if self._training_options.logprob_method == "liger" and not (self.device.type == "cuda" and liger_available()):
            raise ConfigError(
                f"local.logprob_method=liger needs a CUDA device and the liger-kernel package "
                f"(pip install 'kitchen[liger]'); this backend runs on {self.device}"
                + ("" if self.device.type != "cuda" else " without liger-kernel")
                + ": use chunked (the same values, in plain torch)"
            )
        if self._training_options.logprob_method == "liger" and self._dtype == torch.float16:
            raise ConfigError(
                "local.logprob_method=liger does not take part in float16's loss scaling: use bfloat16, or chunked"
            )
        self._lora = lora or LoraOptions()
        self._distributed = distributed
        # Distributed training clients take worker groups from a pool: this backend's own
        # (stopped on close) unless one that outlives it is given.
        self._owns_worker_pool = worker_pool is None
        if distributed is not None and worker_pool is None:
            from adapters.local.distributed import WorkerPool

            worker_pool = WorkerPool()
        self._worker_pool = worker_pool
        self._training_clients: list[LocalTrainingClient | DistributedTrainingClient] = []
        self._lora_groups: dict[str, LoraGroup] = {}
        self._lora_groups_lock = threading.Lock()  # clients are made on threads of their own
        self._vllm: VllmSamplers | None = None
        if vllm is not None:
            self._vllm = self._vllm_samplers(vllm, dtype, seed, lora_rank)

    def _vllm_samplers(self, settings: VllmSettings, dtype: str, seed: int, lora_rank: int | None) -> VllmSamplers:
        from adapters.local.vllm_samplers import VllmOptions, VllmSamplers

        if self.device.type not in ("cpu", "cuda"):
            raise ConfigError(f"local.sampler=vllm runs on cpu or cuda, not {self.device.type}")
        if settings.sleep and self.device.type != "cuda":
            raise ConfigError(
                "local.vllm.sleep: vLLM's sleep mode runs on CUDA only; on the CPU the engine's memory is its "
                "KV cache (local.vllm.cpu_kv_cache_gib)"
            )
        if settings.sleep and self._distributed is not None:
            raise ConfigError("local.vllm.sleep: runs with one training process (local.num_workers: 1)")
        work_dir = self.checkpoint_dir.parent / "vllm"
        ray = self._distributed  # distributed trainers are Ray actors: so are the engines then
        address = None if ray is None else ray.ray_address
        options = VllmOptions(settings, dtype, self.device, lora_rank, work_dir, seed, ray is not None, address)
        return VllmSamplers(options, self._sampling_executor)

    def checkpoint_files(self, path: str) -> list[Path]:
        """The files of a saved checkpoint directory (weights, optimizer, metadata)."""
        directory = Path(path)
        return sorted(f for f in directory.iterdir() if f.is_file()) if directory.is_dir() else []

    def checkpoint_identity(self, path: str) -> tuple[str, int | None]:
        """(base model, lora_rank) recorded in a checkpoint's metadata."""
        identity = read_identity(Path(path))
        return identity.base_model, identity.lora_rank

    def get_tokenizer(self, base_model: str) -> Tokenizer:
        return load_tokenizer(base_model)

    async def create_training_client(
        self, base_model: str, lora_rank: int | None = None, seed: int = 0
    ) -> LocalTrainingClient | DistributedTrainingClient:
        """A client training `base_model`: all weights, or LoRA adapters of `lora_rank` (init from `seed`)."""
        return await asyncio.to_thread(self._training_client, ModelIdentity(base_model, lora_rank, seed))

    async def create_lora_training_client(
        self, base_model: str, lora_rank: int, seed: int, layers: LoraLayers
    ) -> LocalTrainingClient | DistributedTrainingClient:
        """A LoRA client whose adapters sit on `layers` (kitchen's default choice: the
        `lora_target_modules` setting, as `create_training_client` has it)."""
        identity = ModelIdentity(base_model, lora_rank, seed, None if layers == LoraLayers() else layers)
        return await asyncio.to_thread(self._training_client, identity)

    async def create_training_client_from_state(
        self, path: str, with_optimizer: bool = True
    ) -> LocalTrainingClient | DistributedTrainingClient:
        """A client resuming from `save_state` output (weights, and the optimizer unless told not to)."""
        identity = read_identity(Path(path))

        def build() -> LocalTrainingClient | DistributedTrainingClient:
            client = self._training_client(identity)
            client.restore(Path(path), with_optimizer)
            return client

        return await asyncio.to_thread(build)

    async def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> SamplingClient:
        """Sample from saved weights (`save_weights_for_sampler` or `save_state` output) or a base model."""
        checkpoint = None if model_path is None else Path(model_path)
        if checkpoint is not None:
            identity = read_identity(checkpoint)
        elif base_model is not None:
            identity = ModelIdentity(base_model, None, 0)
        else:
            raise ConfigError("create_sampling_client needs model_path or base_model")
        seed = self._seeds.getrandbits(63)
        if self._vllm is not None and checkpoint is None:
            return await self._vllm.base_client(identity.base_model, load_tokenizer(identity.base_model), seed)

        def build() -> torch.nn.Module:
            model = self._model(identity)
            if checkpoint is not None:
                load_weights(checkpoint, model)
            return model

        model = await asyncio.to_thread(build)
        tokenizer = load_tokenizer(identity.base_model)
        if self._vllm is not None:  # a model nobody trains: read on any thread
            return await self._vllm.snapshot_client(model, identity, tokenizer, seed, asyncio.to_thread)
        method = self._training_options.logprob_method
        return LocalSamplingClient(model, tokenizer, self._sampling_executor, seed, self._batch_limits, method)

    async def close(self) -> None:
        """Let queued work finish and stop every worker thread."""
        for client in self._training_clients:
            await client.close()
        for group in self._lora_groups.values():
            await asyncio.to_thread(group.shutdown)
        if self._owns_worker_pool and self._worker_pool is not None:
            await asyncio.to_thread(self._worker_pool.close)
        if self._vllm is not None:
            await self._sampling_executor.submit(self._vllm.close)  # engines are used on that thread only
        await asyncio.to_thread(self._sampling_executor.shutdown)

    def _model(self, identity: ModelIdentity) -> torch.nn.Module:
        return load_model(
            identity.base_model,
            identity.lora_rank,
            identity.seed,
            self.device,
            self._dtype,
            self._lora,
            identity.layers,
        )

    def _groups_lora(self, identity: ModelIdentity) -> bool:
        """Whether a client of `identity` joins its base model's LoRA group: a LoRA client whose
        passes a grouped pass computes as its own (no dropout, no recomputation in the backward, no
        compiled body, no float16 loss scaling)."""
        options = self._training_options
        special = options.train_mode or options.gradient_checkpointing or options.compile
        return identity.lora_rank is not None and not special and self._dtype != torch.float16

    def _lora_grouped(self, identity: ModelIdentity) -> tuple[torch.nn.Module, Lane | None, Lane | None]:
        """A LoRA model on its group's shared base weights, and its lanes on the group's training
        and sampling workers (none for adapters a grouped pass cannot apply, or a vision-language
        model: those run alone)."""
        assert identity.lora_rank is not None
        with self._lora_groups_lock:
            group = self._lora_groups.get(identity.base_model)
            if group is None:
                base = load_base_model(identity.base_model, self._dtype).to(self.device)
                if is_vision_model(base):  # its image inputs take their own path: no grouped passes
                    model = add_lora(base, identity.lora_rank, identity.seed, self._lora, identity.layers)
                    return model.eval(), None, None
                method = self._training_options.logprob_method
                group = self._lora_groups[identity.base_model] = LoraGroup(
                    identity.base_model, base, self._batch_limits, method
                )
        model = add_lora(group.client_base(), identity.lora_rank, identity.seed, self._lora, identity.layers)
        model = model.to(self.device).eval()
        if not groupable(model):
            return model, None, None
        return model, group.lane(), group.sampling_lane(model)

    def _training_client(self, identity: ModelIdentity) -> LocalTrainingClient | DistributedTrainingClient:
        client: LocalTrainingClient | DistributedTrainingClient
        if self._distributed is not None:
            from adapters.local.distributed import DistributedTrainingClient

            assert self._worker_pool is not None  # made with the distributed options
            client = DistributedTrainingClient(
                self._model(identity),
                load_tokenizer(identity.base_model),
                identity,
                self.checkpoint_dir,
                self._sampling_executor,
                self._seeds,
                self._dtype,
                self._distributed,
                self._worker_pool,
                self._batch_limits,
                self._training_options,
                self._lora,
                make_sampler=None if self._vllm is None else self._vllm.snapshot_client,
                losses=self._losses,
            )
        else:
            make_room = self._vllm.make_room if self._vllm is not None and self._vllm.sleeps else None
            lane = sampling_lane = None
            if self._groups_lora(identity):
                model, lane, sampling_lane = self._lora_grouped(identity)
            else:
                model = self._model(identity)
            client = LocalTrainingClient(
                model,
                load_tokenizer(identity.base_model),
                identity,
                self.checkpoint_dir,
                self._sampling_executor,
                self._seeds,
                self._batch_limits,
                self._training_options,
                make_sampler=None if self._vllm is None else self._vllm.snapshot_client,
                losses=self._losses,
                before_compute=make_room,
                lane=lane,
                sampling_lane=None if self._vllm is not None else sampling_lane,
            )
        self._training_clients.append(client)
        return client
