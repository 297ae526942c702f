"""The local backend's vLLM side (`local.sampler: vllm`): one engine per base model, started on
first use and stopped with the backend, and the sampling clients made on them.

Files live in the run directory's `vllm/` folder: per engine its log (`engine-N/engine.log`) and the
base weights written out for an embedded model (whose weights exist only in memory).

Weight sync, with no sampler copy of the model: a snapshot is taken on the training client's own
thread (its weights hold still there) straight from the trained model, and goes into the engine
when its sampling client is made; the seconds both took are the client's `weight_sync_s` (RL's
`time/weight_sync`). Full weights are copied into a shared-memory segment (`vllm_weights`; from a
GPU one device-to-host copy) that the engine reloads in place from (tied output head re-packed,
prefix cache cleared); the segment stays while a client of that version lives. A LoRA snapshot is
its adapter alone, saved into a RAM directory (/dev/shm where there is one) and applied per request
with vLLM's LoRA requests, never merged. With `local.vllm.sleep` the engines sleep whenever a
training client computes (`make_room`).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import torch
from transformers import AutoConfig

from adapters.common.tiny import EMBEDDED_MODELS, TINY_DIR
from adapters.local.checkpoint_io import ModelIdentity
from adapters.local.model_loading import load_base_model
from adapters.local.serial_executor import SerialExecutor
from adapters.local.vllm_engine import BASE_WEIGHTS, EngineProcess, EngineTransport, FullWeights, VllmEngine
from adapters.local.vllm_protocol import EngineInfo, EngineSpec, LoraAdapter
from adapters.local.vllm_sampling_client import VllmSamplingClient
from adapters.local.vllm_settings import VllmSettings
from adapters.local.vllm_weights import SHM_DIR, WeightBuffers
from kitchen.engine.errors import ConfigError
from kitchen.engine.ports import Tokenizer

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The adapter rank limits vLLM accepts (`max_lora_rank`); an adapter of any rank up to it runs."""

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")

T = TypeVar("T")


class RunsJobs(Protocol):
    """Runs a job where the model it reads holds still (a training client's own thread) and
    awaits its result: `SerialExecutor.submit`, or `asyncio.to_thread` for a model nobody trains."""

    def __call__(self, job: Callable[[], T], /) -> Awaitable[T]: ...


@dataclass(frozen=True)
class VllmOptions:
    """What the engines are started with: the `local.vllm` settings and the run's own."""

    settings: VllmSettings
    trainer_dtype: str
    """`local.dtype`: the engine's when `local.vllm.dtype` is auto."""
    device: torch.device
    lora_rank: int | None
    """The run's LoRA rank: engines are started able to apply adapters up to it."""
    work_dir: Path
    seed: int = 0
    on_ray: bool = False
    """The trainers are Ray actors (`local.num_workers > 1`): so are the engines."""
    ray_address: str | None = None


def ram_directory(prefix: str, fallback: Path) -> Path:
    """A new directory in RAM (/dev/shm) where there is one, else under `fallback`."""
    parent = SHM_DIR if SHM_DIR.is_dir() else fallback
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def engine_model_dir(base_model: str, target: Path) -> str:
    """A directory the engine can load `base_model` from: an embedded model's weights (made from
    its seed, in memory only) are written out to `target` first; any other name is passed on."""
    if base_model not in EMBEDDED_MODELS:
        return base_model
    model: Any = load_base_model(base_model, torch.float32)  # a transformers model
    model.save_pretrained(target)
    for name in _TOKENIZER_FILES:
        if (TINY_DIR / name).exists():
            shutil.copy(TINY_DIR / name, target / name)
    return str(target)


def engine_dtype(options: VllmOptions) -> str:
    """The engines' dtype: `local.vllm.dtype`, or the trainer's (`local.dtype`) when auto."""
    return options.trainer_dtype if options.settings.dtype == "auto" else options.settings.dtype


def engine_cpu_threads(settings: VllmSettings) -> int:
    """The engine's torch threads on the CPU: `local.vllm.cpu_threads`, else the trainer's (this
    process's), which `local.cpu_threads` set."""
    return settings.cpu_threads or torch.get_num_threads()


def lora_rank_limit(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that serves adapters of `rank`."""
    for limit in VLLM_LORA_RANKS:
        if rank <= limit:
            return limit
    raise ConfigError(f"lora_rank={rank}: vLLM serves adapters of rank up to {VLLM_LORA_RANKS[-1]}")


class VllmSamplers:
    """Engines by base model, and sampling clients on them. Engine work runs on `executor`."""

    def __init__(self, options: VllmOptions, executor: SerialExecutor) -> None:
        self._options = options
        self._executor = executor
        self._engines: dict[str, VllmEngine] = {}
        self._versions = itertools.count(1)  # full-weights versions (0 is an engine's starting weights)
        self._adapter_ids = itertools.count(1)
        self._adapters_dir = ram_directory("kitchen-vllm-adapters-", options.work_dir)
        self.buffers = WeightBuffers(getattr(torch, engine_dtype(options)))

    @property
    def sleeps(self) -> bool:
        """Whether the engines sleep while the trainer computes (`local.vllm.sleep`)."""
        return self._options.settings.sleep

    async def snapshot_client(
        self, model: torch.nn.Module, identity: ModelIdentity, tokenizer: Tokenizer, seed: int, on_trainer: RunsJobs
    ) -> VllmSamplingClient:
        """A client sampling with `model`'s current weights, read by a job `on_trainer` runs (where
        they hold still) and moved into the engine now."""
        if identity.lora_rank is None:

            def capture_full() -> tuple[FullWeights, float]:
                start = time.perf_counter()
                buffer = self.buffers.take(list(model.named_parameters()))  # a tied head appears once
                weights = FullWeights(next(self._versions), buffer.shared)
                weakref.finalize(weights, self.buffers.give_back, buffer)
                return weights, time.perf_counter() - start

            weights, seconds = await on_trainer(capture_full)
            return await self._client(identity.base_model, weights, None, tokenizer, seed, seconds)
        adapter_id = next(self._adapter_ids)
        adapter = LoraAdapter(adapter_id, str(self._adapters_dir / str(adapter_id)))

        def capture_adapter() -> float:
            start = time.perf_counter()
            save: Any = model.save_pretrained  # a peft model: its adapter only
            save(adapter.path)
            return time.perf_counter() - start

        seconds = await on_trainer(capture_adapter)
        return await self._client(identity.base_model, BASE_WEIGHTS, adapter, tokenizer, seed, seconds)

    async def base_client(self, base_model: str, tokenizer: Tokenizer, seed: int) -> VllmSamplingClient:
        """A client sampling with the base model's own weights."""
        return await self._client(base_model, BASE_WEIGHTS, None, tokenizer, seed, 0.0)

    async def _client(
        self,
        base_model: str,
        weights: FullWeights,
        adapter: LoraAdapter | None,
        tokenizer: Tokenizer,
        seed: int,
        capture_s: float,
    ) -> VllmSamplingClient:
        def sync() -> tuple[VllmEngine, EngineInfo, float]:
            engine = self._engine(base_model)
            info = engine.info  # started first: its start-up is not part of the sync
            start = time.perf_counter()
            engine.use(weights)
            if adapter is not None:
                engine.add_lora(adapter)
            return engine, info, time.perf_counter() - start

        engine, info, seconds = await self._executor.submit(sync)
        sync_s = capture_s + seconds
        client = VllmSamplingClient(engine, info, weights, adapter, tokenizer, self._executor, seed, sync_s)
        if adapter is not None:
            weakref.finalize(client, shutil.rmtree, adapter.path, True)
        return client

    def make_room(self) -> None:
        """Put the engines to sleep, after the calls queued before (on the training thread, before
        a training client computes: it gets the memory the engines free)."""
        for engine in list(self._engines.values()):
            self._executor.call(engine.sleep)

    def _engine(self, base_model: str) -> VllmEngine:
        engine = self._engines.get(base_model)
        if engine is None:
            work_dir = self._options.work_dir / f"engine-{len(self._engines)}"
            work_dir.mkdir(parents=True, exist_ok=True)
            start: Callable[[EngineSpec, Path, float], EngineTransport] = EngineProcess
            if self._options.on_ray:
                from adapters.local.vllm_ray import RayEngine

                settings = self._options.settings
                start = partial(
                    RayEngine,
                    placement=settings.placement,
                    address=self._options.ray_address,
                    custom_resources=settings.resources,
                )
            engine = VllmEngine(
                self._spec(base_model, work_dir),
                work_dir,
                self._options.settings.max_restarts,
                self._options.settings.start_timeout_s,
                start,
            )
            self._engines[base_model] = engine
        return engine

    def _spec(self, base_model: str, work_dir: Path) -> EngineSpec:
        options, settings = self._options, self._options.settings
        model_dir = engine_model_dir(base_model, work_dir / "base_model")
        try:
            tied = bool(AutoConfig.from_pretrained(model_dir).tie_word_embeddings)
        except OSError as exc:
            raise ConfigError(f"model_name {base_model!r}: vLLM cannot load it ({exc})") from exc
        sleep_level: Literal[0, 1, 2] = 0
        if settings.sleep:  # LoRA engines keep their base weights (offloaded); full weights come anew
            sleep_level = 1 if options.lora_rank is not None else 2
        return EngineSpec(
            model_dir=model_dir,
            dtype=engine_dtype(options),
            max_model_len=settings.max_model_len,
            device="cuda" if options.device.type == "cuda" else "cpu",
            max_lora_rank=None if options.lora_rank is None else lora_rank_limit(options.lora_rank),
            tied_head=tied,
            enforce_eager=settings.enforce_eager,
            gpu_memory_utilization=settings.gpu_memory_utilization,
            tensor_parallel_size=settings.tensor_parallel_size,
            cpu_kv_cache_gib=settings.cpu_kv_cache_gib,
            cpu_threads=engine_cpu_threads(settings),
            seed=options.seed,
            cuda_device=options.device.index or 0,
            sleep_level=sleep_level,
        )

    def close(self) -> None:
        """Stop every engine; release the weights' segments and the adapter versions."""
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()
        self.buffers.close()
        shutil.rmtree(self._adapters_dir, ignore_errors=True)
