"""A planted key sent through every path (URL credentials in config, a non-SDK exception, an SDK
retry log line, a mistaken override, a failing tinker request) is found 0 times in the run dir,
stdout and stderr. (That a failing pipelined request leaves no asyncio 'never retrieved' message is
checked in a subprocess, where the leftover futures are really collected: test_pipelined_failure.)"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import adapters.noop.training_client as noop_client
from kitchen.apps.cli import main
from kitchen.engine.secrets import redact
from tests.safety.helpers import FAST

KEY = "tml-planted-key-5f3a9c1e77"


def _count_in_run_dir(run_dir: Path) -> int:
    return sum(p.read_bytes().count(KEY.encode()) for p in run_dir.rglob("*") if p.is_file())


@pytest.fixture(autouse=True)
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_API_KEY", KEY)


def test_redact_covers_env_keys_and_url_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-abcdef-123")
    assert KEY not in redact(f"x {KEY} y") and "tok-abcdef-123" not in redact("a tok-abcdef-123 b")
    assert redact("https://bob:hunter22@host/x") == "https://[redacted]@host/x"


def test_url_credentials_in_config(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "run"
    code = main(["run", "sl_basic", *FAST, f"log_path={log}", f"tinker.base_url=https://user:{KEY}@example.com"])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert (out + err).count(KEY) == 0 and _count_in_run_dir(log) == 0
    assert "https://[redacted]@example.com" in (log / "config.yaml").read_text()


def test_non_sdk_exception_and_sdk_log_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = noop_client.NoopTrainingClient.optim_step
    calls = []

    async def failing(self, adam_params):
        calls.append(1)
        if len(calls) == 3:
            logging.getLogger("tinker.lib.retry_handler").warning("retrying: server said key=%s", KEY)
            logging.getLogger("tinker").error("request failed", exc_info=RuntimeError(f"echo {KEY}"))
            raise RuntimeError(f"upstream rejected Authorization: Bearer {KEY}")
        return await real(self, adam_params)

    monkeypatch.setattr(noop_client.NoopTrainingClient, "optim_step", failing)
    log = tmp_path / "run"
    code = main(["run", "sl_basic", *FAST, f"log_path={log}"])
    out, err = capfd.readouterr()
    assert code == 1 and "upstream rejected" in err and "[redacted]" in err
    assert (out + err).count(KEY) == 0, err
    assert _count_in_run_dir(log) == 0


def test_secret_override_is_not_echoed(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    for override in (f"api_key={KEY}", f"tinker.api_key={KEY}", f"hf_token={KEY}", f"log_path={KEY}/{KEY}x="):
        code = main(["run", "sl_basic", *FAST, f"log_path={tmp_path / 'r'}", override, "data.batch_size=oops"])
        out, err = capfd.readouterr()
        assert code == 2 and (out + err).count(KEY) == 0, err


def test_failing_tinker_request_does_not_leak(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    from kitchen.engine.config.loading import load_config
    from kitchen.engine.launch import run_recipe
    from kitchen.engine.recipe import get_recipe
    from kitchen.engine.runner import StageFailure
    from tests.adapters.tinker.fake_checks import service_error
    from tests.adapters.tinker.fake_sdk import make_fake_backend

    backend, service = make_fake_backend(latency_s=0.01)
    service.fail_next("forward_backward", *[service_error(400, f"bad batch (key {KEY})") for _ in range(3)])
    service.fail_next("optim_step", *[service_error(500, f"optim (key {KEY})") for _ in range(3)])
    recipe = get_recipe("sl_basic")
    log = tmp_path / "run"
    config = load_config(
        recipe.config_cls,
        None,
        ["backend=tinker", "lora_rank=4", f"log_path={log}", "data.max_steps=4", "data.batch_size=4", "eval.every=0"],
    )
    with pytest.raises(StageFailure) as info:
        run_recipe(recipe, config, progress=False, backend=backend)
    out, err = capfd.readouterr()
    assert KEY not in str(info.value)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "Traceback" not in err, err + logged
    assert KEY not in logged
    assert (out + err).count(KEY) == 0 and _count_in_run_dir(log) == 0


QUERY_KEY = "qs-planted-token-8d1e44b0aa"


def test_query_string_secrets_are_redacted() -> None:
    for url in (
        f"https://h/v1?token={QUERY_KEY}&page=2",
        f"https://h/v1?page=2&api_key={QUERY_KEY}",
        f"https://h/v1?access_token={QUERY_KEY}#top",
        f"https://bucket.s3/x?X-Amz-Signature={QUERY_KEY}&X-Amz-Credential={QUERY_KEY}",
        f"https://blob/x?sv=2020&sig={QUERY_KEY}",
        f"https://h/?key={QUERY_KEY};client_secret={QUERY_KEY}",
        f"<a href='https://h/?a=1&amp;token={QUERY_KEY}'>",  # as an HTML page escapes it
    ):
        assert QUERY_KEY not in redact(url), url
    assert redact(f"https://h/v1?token={QUERY_KEY}&page=2") == "https://h/v1?token=[redacted]&page=2"
    harmless = "https://h/search?q=monkey&keyword=tokens&page=2&sort=key"
    assert redact(harmless) == harmless


def test_query_string_secrets_redacted_everywhere(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token in a URL's query string, in the config and in an error: not in config.yaml, events,
    traces, stdout/stderr or the report; and every sink gets the redacted config (TensorBoard used
    to get it as loaded, URL password and all)."""
    real = noop_client.NoopTrainingClient.optim_step
    calls = []

    async def failing(self, adam_params):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError(f"GET https://example.com/v1/blob?sig={QUERY_KEY}&sv=1 answered 403")
        return await real(self, adam_params)

    monkeypatch.setattr(noop_client.NoopTrainingClient, "optim_step", failing)
    log = tmp_path / "run"
    url = f"tinker.base_url=https://user:{KEY}@example.com/v1?token={QUERY_KEY}&region=eu"
    code = main(
        ["run", "sl_basic", *FAST, f"log_path={log}", "logging.trace_file=true", "logging.loggers=[tensorboard]", url]
    )
    out, err = capfd.readouterr()
    assert code == 1 and "answered 403" in err and "sig=[redacted]" in err, err
    assert "https://[redacted]@example.com/v1?token=[redacted]&region=eu" in (log / "config.yaml").read_text()
    board = b"".join(p.read_bytes() for p in (log / "tensorboard").rglob("*") if p.is_file())
    assert b"example.com" in board and KEY.encode() not in board  # the config was sent, redacted
    assert "sig=[redacted]" in (log / "traces.jsonl").read_text()
    assert "sig=[redacted]" in (log / "events.jsonl").read_text()
    assert main(["report", str(log)]) == 0
    out2, err2 = capfd.readouterr()
    assert (out + err + out2 + err2).count(QUERY_KEY) == 0
    leaked = [str(p) for p in log.rglob("*") if p.is_file() and QUERY_KEY.encode() in p.read_bytes()]
    assert leaked == [] and _count_in_run_dir(log) == 0


def test_events_read_the_environment_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Secret values are computed when the run's logger is made (and when one is added), not for
    every structlog event (which scanned all of os.environ each time)."""
    from kitchen.engine import secrets
    from kitchen.engine.observe.logging import make_run_logger

    scans = []
    real = secrets.secret_values

    def counting() -> list[str]:
        scans.append(1)
        return real()

    monkeypatch.setattr(secrets, "secret_values", counting)
    logger, sink = make_run_logger(tmp_path / "events.jsonl", console_level="critical")
    for index in range(50):
        logger.info("tick", index=index, note=f"key {KEY}")
    added = "added-later-secret-99"
    secrets.add_secret(added)
    logger.info("tock", note=f"now {added}")
    sink.close()
    text = (tmp_path / "events.jsonl").read_text()
    assert len(scans) <= 2, len(scans)  # the logger's start, add_secret
    assert text.count("tick") == 50 and KEY not in text and added not in text
