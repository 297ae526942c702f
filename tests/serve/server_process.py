"""`kitchen serve` as a real process on 127.0.0.1 for the tests: started, waited for, killed.

A real process (not an in-process app) so that the real tinker SDK talks to it over HTTP exactly
as a user's program would, and so that `kill -9` really kills it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

API_KEY = "tml-kitchen-serve-test-key-0001"
OTHER_KEY = "tml-kitchen-serve-test-key-0002"
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    store: Path
    backend: str = "noop"
    extra: Sequence[str] = ()
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    hf_cache: Path | None = None
    """The HF cache the server writes its served names' tokenizers to (default: a folder beside
    the store, so tests leave the machine's own cache alone)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120.0) -> ServerProcess:
        self.log = self.store.parent / f"serve-{self.port}-{time.monotonic_ns()}.log"
        command = [sys.executable, "-m", "kitchen", "serve", "--backend", self.backend, "--port", str(self.port)]
        command += ["--store", str(self.store), *self.extra]
        if self.hf_cache is None:
            self.hf_cache = self.store.parent / "hf-cache"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_CACHE": str(self.hf_cache)}
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"kitchen serve exited {self.process.returncode}: {self.output()}")
            try:
                if httpx.get(f"{self.url}/api/v1/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"kitchen serve did not answer /healthz in {timeout_s} s: {self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log and self.log.exists() else ""

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)


_SHARED: dict[str, ServerProcess] = {}


def shared_server(backend: str = "noop") -> ServerProcess:
    """One `kitchen serve --backend BACKEND` for the whole test session, started on first use and
    stopped at exit: tests that only need a live server share it instead of paying a start each."""
    if backend not in _SHARED:
        import atexit
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix=f"kitchen-serve-{backend}-"))
        _SHARED[backend] = ServerProcess(folder / "store", backend=backend).start()
        atexit.register(_SHARED[backend].stop)
    return _SHARED[backend]
