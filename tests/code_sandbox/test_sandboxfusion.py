"""The SandboxFusion client against a loopback server speaking its protocol (127.0.0.1 only)."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sandbox import Program, SandboxUnavailableError
from sandbox.sandboxfusion import SandboxFusionSandbox


class FakeServer:
    """Answers queued (status, body) pairs in order, then the last one forever; records requests."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.release.set()


@pytest.fixture
def server() -> Iterator[tuple[FakeServer, str]]:
    state = FakeServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.requests.append({"path": self.path, **body})
                state.in_flight += 1
                state.most_in_flight = max(state.most_in_flight, state.in_flight)
                status, answer = state.answers.pop(0) if len(state.answers) > 1 else state.answers[0]
            state.release.wait(5)
            with state.lock:
                state.in_flight -= 1
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def finished(stdout: str, code: int = 0, status: str = "Finished") -> dict[str, Any]:
    overall = "Success" if status == "Finished" and code == 0 else "Failed"
    run = {"status": status, "return_code": code, "stdout": stdout, "stderr": "", "execution_time": 0.25}
    return {"status": overall, "run_result": run}


def run(url: str, program: Program, **kwargs: Any) -> Any:
    async def go() -> Any:
        sandbox = SandboxFusionSandbox(url, **kwargs)
        try:
            return await sandbox.run(program, 3.0)
        finally:
            await sandbox.aclose()

    return asyncio.run(go())


def test_success_sends_the_protocol(server: tuple[FakeServer, str]) -> None:
    state, url = server
    state.answers = [(200, finished("hi\n"))]
    result = run(url, Program("print(input())", files={"data/x.txt": b"\x00\x01"}, stdin="hi\n"))
    assert (result.status, result.exit_code, result.stdout, result.elapsed_s) == ("ok", 0, "hi\n", 0.25)
    (request,) = state.requests
    assert request["path"] == "/run_code" and request["language"] == "python" and request["stdin"] == "hi\n"
    assert request["run_timeout"] == 3.0 and base64.b64decode(request["files"]["data/x.txt"]) == b"\x00\x01"


def test_failure_timeout_and_sandbox_error(server: tuple[FakeServer, str]) -> None:
    state, url = server
    state.answers = [(200, finished("", code=1, status="Error"))]
    assert run(url, Program("raise SystemExit(1)")).status == "failed"
    state.answers = [(200, finished("", code=-1, status="TimeLimitExceeded"))]
    assert run(url, Program("while True: pass")).status == "timeout"
    state.answers = [(200, {"status": "SandboxError", "message": "container died"})]
    result = run(url, Program("print(1)"))
    assert result.status == "sandbox_error" and "container died" in result.detail


def test_server_errors_are_retried(server: tuple[FakeServer, str]) -> None:
    state, url = server
    state.answers = [(503, {}), (500, {}), (200, finished("ok\n"))]
    result = run(url, Program("print('ok')"), retries=3, backoff_s=0.01)
    assert result.status == "ok" and len(state.requests) == 3


def test_unreachable_server_names_the_url() -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(SandboxUnavailableError, match=f"{url} unreachable after 3 attempts"):
        run(url, Program("print(1)"), retries=2, backoff_s=0.01)


def test_concurrency_is_bounded(server: tuple[FakeServer, str]) -> None:
    state, url = server
    state.answers = [(200, finished("x"))]
    state.release.clear()

    async def go() -> list[Any]:
        sandbox = SandboxFusionSandbox(url, concurrency=2)
        runs = [asyncio.ensure_future(sandbox.run(Program("print(1)"), 3.0)) for _ in range(6)]
        while len(state.requests) < 2:
            await asyncio.sleep(0.01)
        state.release.set()
        results = await asyncio.gather(*runs)
        await sandbox.aclose()
        return results

    results = asyncio.run(go())
    assert [r.status for r in results] == ["ok"] * 6 and state.most_in_flight == 2


def test_bad_url() -> None:
    with pytest.raises(ValueError, match="http"):
        SandboxFusionSandbox("127.0.0.1:8080")
