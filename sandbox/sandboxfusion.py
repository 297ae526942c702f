"""A client for a SandboxFusion server (`POST {url}/run_code`), for code that must run elsewhere.

What it protects against is the server's business (it runs each program in its own container);
this client adds a concurrency limit, retries with exponential backoff on connection errors and
5xx answers, and a `SandboxUnavailableError` naming the URL once retries are spent. Proxy
environment variables are ignored: the request goes straight to the given URL.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import httpx

from sandbox.types import Program, RunResult, RunStatus, Sandbox, SandboxUnavailableError

_RUN_STATUS: dict[str, RunStatus] = {"Finished": "ok", "TimeLimitExceeded": "timeout", "Error": "failed"}


def _encode_files(program: Program) -> dict[str, str]:
    return {
        name: base64.b64encode(content if isinstance(content, bytes) else content.encode("utf-8")).decode("ascii")
        for name, content in program.files.items()
    }


def _result(answer: Any, elapsed_s: float) -> RunResult:
    """Map the server's answer onto `RunResult`; anything unexpected is a sandbox_error."""
    if not isinstance(answer, dict):
        return RunResult("sandbox_error", None, "", "", elapsed_s, detail=f"answer is not a JSON object: {answer!r}")
    run = answer.get("run_result") or {}
    if answer.get("status") == "SandboxError" or not isinstance(run, dict) or run.get("status") not in _RUN_STATUS:
        detail = str(answer.get("message") or answer.get("status") or "no run_result")
        return RunResult("sandbox_error", None, "", "", elapsed_s, detail=f"server: {detail}")
    status = _RUN_STATUS[run["status"]]
    code = run.get("return_code")
    if status == "ok" and code not in (0, None):
        status = "failed"
    return RunResult(
        status=status,
        exit_code=code,
        stdout=str(run.get("stdout") or ""),
        stderr=str(run.get("stderr") or ""),
        elapsed_s=float(run.get("execution_time") or elapsed_s),
        detail="time limit exceeded on the server" if status == "timeout" else "",
    )


class SandboxFusionSandbox(Sandbox):
    """`retries` extra attempts after the first, waiting `backoff_s`, then twice that, and so on."""

    def __init__(
        self, url: str, concurrency: int = 8, retries: int = 3, backoff_s: float = 0.5, http_timeout_s: float = 30.0
    ) -> None:
        super().__init__(concurrency)
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"sandboxfusion url must start with http:// or https://, got {url!r}")
        if retries < 0 or backoff_s < 0:
            raise ValueError(f"sandboxfusion retries and backoff must be non-negative, got {retries}, {backoff_s}")
        self.url = url.rstrip("/")
        self.retries = retries
        self.backoff_s = backoff_s
        self.http_timeout_s = http_timeout_s
        self._client: httpx.AsyncClient | None = None

    async def _run(self, program: Program, timeout_s: float) -> RunResult:
        if program.mounts:
            return RunResult("sandbox_error", None, "", "", 0.0, detail="sandboxfusion cannot show dirs at fixed paths")
        body = {
            "code": program.code,
            "language": program.language,
            "run_timeout": timeout_s,
            "stdin": program.stdin,
            "files": _encode_files(program),
        }
        client = self._client = self._client or httpx.AsyncClient(
            timeout=self.http_timeout_s + timeout_s, trust_env=False
        )
        loop = asyncio.get_running_loop()
        start = loop.time()
        last_error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = await client.post(f"{self.url}/run_code", json=body)
            except httpx.TransportError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code >= 500:
                last_error = f"HTTP {response.status_code}"
                continue
            if response.status_code != 200:
                detail = f"HTTP {response.status_code}: {response.text[:200]}"
                return RunResult("sandbox_error", None, "", "", loop.time() - start, detail=detail)
            try:
                answer = response.json()
            except ValueError:
                answer = response.text[:200]
            return _result(answer, loop.time() - start)
        raise SandboxUnavailableError(
            f"sandboxfusion server {self.url} unreachable after {self.retries + 1} attempts: {last_error}"
        )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
