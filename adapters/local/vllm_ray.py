"""The vLLM engine as a Ray actor, beside the FSDP2 training workers (`local.num_workers > 1`).

The same `EngineHost` as in an engine process, called through Ray instead of a socket; its output
goes to the run's engine log as well. Placement (`local.vllm.placement`): on GPUs `colocated`
reserves no GPU in Ray and shares the first one with the training worker there (each takes its
`gpu_memory_utilization` share), `separate` reserves `tensor_parallel_size` GPUs of its own; on the
CPU both reserve nothing. `separate` also reserves `local.vllm.resources`, Ray custom resources that
put the engine on the node of a cluster declaring them.

An engine on another node than the driver shares nothing with it but Ray. Full weights cannot come
through the driver's shared memory, so they go through Ray's object store (`vllm_weights.ship`);
what vLLM starts from (a model folder on the driver's disk: config, tokenizer, starting weights)
goes the same way, one object per file, into a temporary folder on the engine's node, which also
holds the engine's log; each answer of the actor carries the log's new lines, which the driver
appends to the run's engine log. LoRA adapters (folders in the driver's RAM) are shipped the same
way on their first use, and again to an engine started anew; one the driver has removed (no client
holds its version) is removed on the node with the next upload. The folder is removed when the
engine stops (not when its node or process dies).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from adapters.local.distributed import ensure_ray
from adapters.local.vllm_engine import EngineDied, EngineError, engine_environment, log_tail, unwrap, write_start_line
from adapters.local.vllm_protocol import (
    EngineInfo,
    EngineSpec,
    Failure,
    GenerateRequest,
    LoraAdapter,
    ScoreRequest,
    SharedWeights,
)
from adapters.local.vllm_settings import RAY_BUILTIN_RESOURCES
from adapters.local.vllm_weights import ship
from kitchen.engine.errors import ConfigError

Placement = Literal["colocated", "separate"]

STOP_TIMEOUT_S = 30.0
"""How long a stopping engine's actor may take to hand over its last log lines and remove its folder."""


class EngineActor:
    """Runs in a Ray worker process of its own: `start` starts the engine in it, with the engine's
    log in the driver's run directory (same node) or in a folder of the node's own (another node)."""

    def __init__(self) -> None:
        self._host: Any = None
        self._folder: Path | None = None
        self._sent = 0

    def where(self) -> tuple[str, int]:
        """This actor's Ray node id and process id: the driver decides what to ship from them."""
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()

    def start(
        self, spec: EngineSpec, log_path: str | None, files: dict[str, Any] | None
    ) -> tuple[EngineInfo | Failure, bytes]:
        """Start the engine; its info (or why it failed to start) and the log's new lines.
        `log_path` None: the log goes into a folder of this node's; `files`: the model folder's
        files (object refs by relative path), written there and started from."""
        from adapters.local.vllm_host import start_host

        if log_path is None:
            self._folder = Path(tempfile.mkdtemp(prefix="kitchen-vllm-"))
            log_path = str(self._folder / "engine.log")
        log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.dup2(log, 1)
        os.dup2(log, 2)
        if files is not None:
            assert self._folder is not None
            spec = replace(spec, model_dir=write_files(self._folder / "model", files))
            print(f"kitchen: starting from {len(files)} files shipped through Ray's object store", flush=True)
        self._host = start_host(spec)
        return (self._host if isinstance(self._host, Failure) else self._host.info), self._news()

    def call(self, method: str, args: tuple[Any, ...]) -> tuple[Any, bytes]:
        from adapters.local.vllm_host import dispatch

        assert self._host is not None and not isinstance(self._host, Failure)
        return dispatch(self._host, method, args), self._news()

    def receive(self, name: str, files: dict[str, Any], drop: list[str]) -> tuple[str, bytes]:
        """Write shipped files into this node's folder `name` (an adapter), removing the folders in
        `drop`; where they are, and the log's new lines."""
        assert self._folder is not None
        for old in drop:
            shutil.rmtree(self._folder / old, ignore_errors=True)
        path = write_files(self._folder / name, files)
        print(f"kitchen: received {name} ({len(files)} files) through Ray's object store", flush=True)
        return path, self._news()

    def close(self) -> bytes:
        """The log's last lines; this node's folder is removed (the actor is killed next)."""
        news = self._news()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
        return news

    def _news(self) -> bytes:
        """What the node-local log gained since the last answer (nothing when the log is the driver's)."""
        if self._folder is None:
            return b""
        with (self._folder / "engine.log").open("rb") as log:
            log.seek(self._sent)
            news = log.read()
        self._sent += len(news)
        return news


def write_files(folder: Path, files: dict[str, Any]) -> str:
    """`folder`, holding the shipped files (fetched one at a time: one file's bytes in memory)."""
    import ray

    for name, ref in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(ray.get(ref))
    return str(folder)


def folder_files(ray: Any, model_dir: str) -> dict[str, Any] | None:
    """A folder on the driver's disk (a model's, an adapter's), file by file in Ray's object store
    (refs by relative path); None for a name that is no folder here (a Hub id: the engine's node
    downloads it)."""
    root = Path(model_dir)
    if not root.is_dir():
        return None
    files = sorted(path for path in root.rglob("*") if path.is_file())
    return {str(path.relative_to(root)): ray.put(path.read_bytes()) for path in files}


class RayEngine:
    """An `EngineTransport` on an `EngineActor`, started now (this waits until it serves)."""

    def __init__(
        self,
        spec: EngineSpec,
        log_path: Path,
        start_timeout_s: float,
        placement: Placement,
        address: str | None,
        custom_resources: dict[str, float] | None = None,
    ) -> None:
        self._ray = ray = ensure_ray(address)
        self._log_path = log_path
        self.remote = False
        """The engine runs on another node than this driver: nothing but Ray reaches it."""
        self._adapters: dict[int, tuple[str, str]] = {}
        """Adapters shipped to the engine's node, by id: their folder here and there."""
        resources: dict[str, Any] = {"num_cpus": 0}
        if spec.device == "cuda" and placement == "separate":
            resources["num_gpus"] = spec.tensor_parallel_size
        if custom_resources:
            check_declared(ray, custom_resources)
            resources["resources"] = dict(custom_resources)
        write_start_line(log_path)
        wanted = (
            "PYTHONPATH",
            "PYTHONUNBUFFERED",
            "LD_PRELOAD",
            "VLLM_CPU_KVCACHE_SPACE",
            "OMP_NUM_THREADS",
            "KMP_BLOCKTIME",
            "VLLM_NO_USAGE_STATS",
            "DO_NOT_TRACK",
        )
        env = {key: value for key, value in engine_environment(spec).items() if key in wanted}
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        actor = ray.remote(**resources)(EngineActor).options(runtime_env={"env_vars": env})
        self._actor = actor.remote()
        try:
            node, self._pid = self._get(self._actor.where.remote(), "placement", start_timeout_s)
            self.remote = node != ray.get_runtime_context().get_node_id()
            files = folder_files(ray, spec.model_dir) if self.remote else None
            started = self._answer(
                self._actor.start.remote(spec, None if self.remote else str(log_path), files),
                "start-up",
                start_timeout_s,
            )
            self._info: EngineInfo = unwrap(started, "start-up")
        except BaseException:
            self.stop()
            raise

    @property
    def info(self) -> EngineInfo:
        return self._info

    @property
    def pid(self) -> int:
        return int(self._pid)

    def call(self, method: str, *args: Any) -> Any:
        if self.remote and method == "load_weights" and isinstance(args[0], SharedWeights):
            return ship(args[0], lambda shipped: self._call(method, (shipped,)))
        if self.remote:
            args = tuple(self._on_node(arg) for arg in args)
        return self._call(method, args)

    def _on_node(self, value: Any) -> Any:
        """A call's argument with its adapters' folders replaced by their copies on the engine's node."""
        if isinstance(value, list):
            return [self._on_node(item) for item in value]
        if isinstance(value, GenerateRequest | ScoreRequest) and value.lora is not None:
            return replace(value, lora=self._on_node(value.lora))
        if isinstance(value, LoraAdapter):
            return replace(value, path=self._adapter_on_node(value))
        return value

    def _adapter_on_node(self, adapter: LoraAdapter) -> str:
        """Where `adapter` is on the engine's node, shipped there first if it is new to it."""
        if adapter.adapter_id not in self._adapters:
            files = folder_files(self._ray, adapter.path)
            if files is None:
                raise EngineError(f"the LoRA adapter folder {adapter.path} is gone (its client was closed)")
            gone = [key for key, (here, _) in self._adapters.items() if not Path(here).exists()]
            drop = [Path(self._adapters.pop(key)[1]).name for key in gone]
            name = f"adapter-{adapter.adapter_id}"
            there = self._answer(self._actor.receive.remote(name, files, drop), "an adapter's upload")
            self._adapters[adapter.adapter_id] = (adapter.path, there)
        return self._adapters[adapter.adapter_id][1]

    def _call(self, method: str, args: tuple[Any, ...]) -> Any:
        return unwrap(self._answer(self._actor.call.remote(method, args), method), method)

    def _answer(self, ref: Any, what: str, timeout_s: float | None = None) -> Any:
        """The value of an answer that carries the engine's new log lines, which go into the run's log."""
        value, news = self._get(ref, what, timeout_s)
        self._append(news)
        return value

    def _append(self, news: bytes) -> None:
        if news:
            with self._log_path.open("ab") as log:
                log.write(news)

    def _get(self, ref: Any, what: str, timeout_s: float | None = None) -> Any:
        ray = self._ray
        try:
            return ray.get(ref, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            self.stop()
            raise EngineDied(f"the vLLM engine did not finish {what} within {timeout_s:g} s{self._tail()}") from None
        except ray.exceptions.RayActorError as exc:
            raise EngineDied(
                f"the vLLM engine's actor died during {what} ({type(exc).__name__}){self._tail()}"
            ) from None

    def _tail(self) -> str:
        where = " (the engine's node sent its lines up to its last answer)" if self.remote else ""
        return f"; the last lines of {self._log_path}{where}:\n{log_tail(self._log_path)}"

    def stop(self) -> None:
        """End the actor (and the engine in it); one on another node first hands over its last log
        lines and removes its folder, if it answers within `STOP_TIMEOUT_S`."""
        if self.remote:
            with contextlib.suppress(Exception):
                self._append(self._ray.get(self._actor.close.remote(), timeout=STOP_TIMEOUT_S))
        self._ray.kill(self._actor)


def check_declared(ray: Any, resources: dict[str, float]) -> None:
    """Fail now, not after the start timeout, when no node of the cluster declares a resource."""
    declared = ray.cluster_resources()
    missing = sorted(name for name in resources if name not in declared)
    if missing:
        custom = sorted(name for name in declared if name not in RAY_BUILTIN_RESOURCES and ":" not in name)
        raise ConfigError(
            f"local.vllm.resources: no node of the Ray cluster declares {', '.join(missing)} (its nodes declare "
            f"{', '.join(custom) or 'no custom resources'}); start the engine's node with "
            "ray start --resources='{\"NAME\": 1}'"
        )
