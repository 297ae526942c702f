"""The vLLM engine as a Ray actor, beside the FSDP2 training workers (`local.num_workers > 1`).

The same `EngineHost` as in an engine process, called through Ray instead of a socket; its output
goes to the run's engine log as well. Placement (`local.vllm.placement`): on GPUs `colocated`
reserves no GPU in Ray and shares the first one with the training worker there (each takes its
`gpu_memory_utilization` share), `separate` reserves `tensor_parallel_size` GPUs of its own; on the
CPU both reserve nothing. `separate` also reserves `local.vllm.resources`, Ray custom resources that
put the engine on the node of a cluster declaring them.

Full weights reach an engine on the driver's node through the driver's shared memory; one on
another node cannot map that, so they go through Ray's object store (`vllm_weights.ship`). The
engine's node must still see the run directory (the actor appends to the engine's log there, and
an embedded model's starting weights are written out there) and LoRA adapters, which are files,
reach an engine on the driver's node only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from adapters.local.distributed import ensure_ray
from adapters.local.vllm_engine import EngineDied, engine_environment, log_tail, unwrap, write_start_line
from adapters.local.vllm_protocol import EngineInfo, EngineSpec, Failure, SharedWeights
from adapters.local.vllm_settings import RAY_BUILTIN_RESOURCES
from adapters.local.vllm_weights import ship
from kitchen.engine.errors import ConfigError

Placement = Literal["colocated", "separate"]


class EngineActor:
    """Runs in a Ray worker process of its own: the engine, started when the actor is made."""

    def __init__(self, spec: EngineSpec, log_path: str) -> None:
        from adapters.local.vllm_host import start_host

        log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.dup2(log, 1)
        os.dup2(log, 2)
        self._host = start_host(spec)
        self._started = self._host if isinstance(self._host, Failure) else self._host.info

    def started(self) -> tuple[EngineInfo | Failure, int, str]:
        """The engine's info (or why it failed to start), this process's id and its Ray node's."""
        import ray

        return self._started, os.getpid(), ray.get_runtime_context().get_node_id()

    def call(self, method: str, args: tuple[Any, ...]) -> Any:
        from adapters.local.vllm_host import dispatch

        assert not isinstance(self._host, Failure)
        return dispatch(self._host, method, args)


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
        self._actor = actor.remote(spec, str(log_path))
        started, self._pid, node = self._get(self._actor.started.remote(), "start-up", start_timeout_s)
        self.remote = node != ray.get_runtime_context().get_node_id()
        """The engine runs on another node than this driver: weights go through Ray's object store."""
        try:
            self._info: EngineInfo = unwrap(started, "start-up")
            if self.remote and spec.max_lora_rank is not None:
                raise ConfigError(
                    "local.vllm.resources put the vLLM engine on another node than the driver, and LoRA "
                    "adapters (files in the driver's memory) reach only an engine on the driver's node: train "
                    "full weights (no lora_rank), or name resources of the driver's node"
                )
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
        return self._call(method, args)

    def _call(self, method: str, args: tuple[Any, ...]) -> Any:
        return unwrap(self._get(self._actor.call.remote(method, args), method), method)

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
        return f"; the last lines of {self._log_path}:\n{log_tail(self._log_path)}"

    def stop(self) -> None:
        """End the actor (and the engine in it)."""
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
