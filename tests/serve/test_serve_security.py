"""`kitchen serve` security rules, one test each, and bad requests answered with a 4xx, never a 500.

The server runs as a real process with an API keys file; requests are plain HTTP (httpx) so each
rule is tested at the wire, and with the real SDK where a program would meet it.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tinker

from kitchen.apps.serve import keys as keys_module
from kitchen.apps.serve.server import ServeSettings, build_service, is_loopback
from kitchen.engine.errors import ConfigError
from tests.serve.server_process import API_KEY, OTHER_KEY, ServerProcess

INTRUDER = "tml-not-a-listed-key-000000"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("secure")
    keys_file = folder / "keys.txt"
    keys_file.write_text(f"# test keys\n{API_KEY}\n{OTHER_KEY}\n")
    process = ServerProcess(
        folder / "store", backend="noop", extra=["--api-keys", str(keys_file), "--max-body-mb", "2"]
    ).start()
    yield process
    process.stop()


def post(
    server: ServerProcess, path: str, body: object = None, key: str | None = API_KEY, **kw: object
) -> httpx.Response:
    headers = {"X-API-Key": key} if key else {}
    return httpx.post(f"{server.url}/api/v1/{path}", json=body, headers=headers, timeout=30, **kw)  # type: ignore[arg-type]


def session(server: ServerProcess, key: str = API_KEY) -> str:
    body: dict[str, object] = {"tags": [], "user_metadata": None, "sdk_version": "test", "type": "create_session"}
    return str(post(server, "create_session", body, key).json()["session_id"])


def test_binds_loopback_by_default_and_refuses_other_addresses_without_keys(tmp_path: Path) -> None:
    assert ServeSettings().host == "127.0.0.1" and is_loopback("127.0.0.1") and not is_loopback("0.0.0.0")
    with pytest.raises(ConfigError, match="requires --api-keys"):
        build_service(ServeSettings(backend="noop", host="0.0.0.0", store=tmp_path / "s"))


def test_a_key_not_in_the_keys_file_is_refused(server: ServerProcess) -> None:
    assert post(server, "create_session", {}, INTRUDER).status_code == 401
    assert post(server, "create_session", {}, None).status_code == 401
    with pytest.raises(tinker.AuthenticationError):
        tinker.ServiceClient(base_url=server.url, api_key=INTRUDER).create_lora_training_client("tiny", rank=4).result()


def test_keys_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every listed key is compared with hmac.compare_digest, whichever matches: no early exit."""
    compared: list[bytes] = []
    real = keys_module.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr(keys_module.hmac, "compare_digest", counting)
    check = keys_module.KeyCheck((API_KEY, OTHER_KEY, "tml-third-key-00000000"))
    assert check.owner(API_KEY) == keys_module.owner_of(API_KEY)
    assert len(compared) == 3
    with pytest.raises(keys_module.Unauthorized):
        check.owner(INTRUDER)
    assert len(compared) == 6


def test_keys_never_reach_the_log_or_the_store(server: ServerProcess) -> None:
    client = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    training = client.create_lora_training_client("tiny", rank=4).result()
    training.save_state("k").result()
    client.close("success").result()
    post(server, "create_session", {}, INTRUDER)
    stored = "".join(p.read_text(errors="ignore") for p in server.store.rglob("*") if p.is_file())
    for key in (API_KEY, OTHER_KEY, INTRUDER):
        assert key not in server.output() and key not in stored


def test_each_key_sees_only_its_own_sessions_runs_and_checkpoints(server: ServerProcess) -> None:
    mine = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    training = mine.create_lora_training_client("tiny", rank=4).result()
    path = training.save_state("private").result().path
    theirs = tinker.ServiceClient(base_url=server.url, api_key=OTHER_KEY)
    with pytest.raises(tinker.NotFoundError):
        theirs.create_sampling_client(model_path=path).result()
    rest = tinker.RestClient(base_url=server.url, api_key=OTHER_KEY)
    assert training.model_id not in [r.training_run_id for r in rest.list_training_runs().result().training_runs]
    assert path not in [c.tinker_path for c in rest.list_user_checkpoints().result().checkpoints]
    their_session = session(server, OTHER_KEY)
    assert post(server, "session_heartbeat", {"session_id": their_session}, API_KEY).status_code == 404
    assert (
        httpx.get(
            f"{server.url}/api/v1/training_runs/{training.model_id}", headers={"X-API-Key": OTHER_KEY}
        ).status_code
        == 404
    )
    mine.close("success").result()
    theirs.close("success").result()


@pytest.mark.parametrize(
    ("path", "content"),
    [
        ("create_session", b"\xff\xfe not json"),
        ("create_model", b'{"session_id": 3}'),
        ("forward_backward", b"\x0a\xff\xff\xff garbage protobuf"),
        ("retrieve_future", b"[]"),
        ("asample", b'{"prompt": {"chunks": "x"}}'),
        ("weights_info", b'"just a string"'),
    ],
)
def test_garbage_bodies_get_a_400_with_a_message(server: ServerProcess, path: str, content: bytes) -> None:
    answer = post(server, path, None, content=content)
    assert 400 <= answer.status_code < 500 and answer.json()["detail"]


def test_huge_bodies_are_refused_with_413(server: ServerProcess) -> None:
    answer = post(server, "forward_backward", None, content=b"\0" * (3 * 1024 * 1024))
    assert answer.status_code == 413 and "limit" in answer.json()["detail"]


def test_unknown_model_is_a_400(server: ServerProcess) -> None:
    body = {"session_id": session(server), "model_seq_id": 0, "base_model": "nope/nope", "type": "create_model"}
    answer = post(server, "create_model", body)
    assert answer.status_code == 400 and "unknown base model 'nope/nope'" in answer.json()["detail"]


def test_a_client_that_disappears_mid_request_leaves_the_server_serving(server: ServerProcess) -> None:
    host, port = "127.0.0.1", server.port
    with socket.create_connection((host, port)) as sock:
        sock.sendall(
            f"POST /api/v1/forward_backward HTTP/1.1\r\nHost: {host}\r\nX-API-Key: {API_KEY}\r\n"
            "Content-Length: 100000\r\nContent-Type: application/x-protobuf\r\n\r\npartial".encode()
        )
    session_id = session(server)
    request_id = f"{session_id}:train:0#create"
    body = {"session_id": session_id, "model_seq_id": 0, "base_model": "tiny", "type": "create_model"}
    assert post(server, "create_model", body).json()["request_id"] == request_id
    assert httpx.get(f"{server.url}/api/v1/healthz").status_code == 200
    assert server.process is not None and server.process.poll() is None
