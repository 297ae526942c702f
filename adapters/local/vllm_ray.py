"""The vLLM engine as a Ray actor, beside the FSDP2 training workers (`local.num_workers > 1`).

The same `EngineHost` as in an engine process, called through Ray instead of a socket; its output
goes to the run's engine log as well. Placement (`local.vllm.placement`): on GPUs `colocated`
reserves no GPU in Ray and shares the first one with the training worker there (each takes its
`gpu_memory_utilization` share), `separate` reserves `tensor_parallel_size` GPUs of its own; on the
CPU both reserve nothing. Full weights reach the engine through a file in the run directory, so
the engine's actor must run on the driver's machine.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from adapters.local.distributed import ensure_ray
from adapters.local.vllm_engine import EngineDied, engine_environment, log_tail, unwrap, write_start_line
from adapters.local.vllm_protocol import EngineInfo, EngineSpec, Failure

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

    def started(self) -> tuple[EngineInfo | Failure, int]:
        """The engine's info (or why it failed to start) and this process's id."""
        return self._started, os.getpid()

    def call(self, method: str, args: tuple[Any, ...]) -> Any:
        from adapters.local.vllm_host import dispatch

        assert not isinstance(self._host, Failure)
        return dispatch(self._host, method, args)


class RayEngine:
    """An `EngineTransport` on an `EngineActor`, started now (this waits until it serves)."""

    def __init__(
        self, spec: EngineSpec, log_path: Path, start_timeout_s: float, placement: Placement, address: str | None
    ) -> None:
        self._ray = ray = ensure_ray(address)
        self._log_path = log_path
        write_start_line(log_path)
        resources: dict[str, float] = {"num_cpus": 0}
        if spec.device == "cuda" and placement == "separate":
            resources["num_gpus"] = spec.tensor_parallel_size
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
        started, self._pid = self._get(self._actor.started.remote(), "start-up", start_timeout_s)
        try:
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
