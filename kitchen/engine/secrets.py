"""One redaction filter for everything a run prints or writes: log records, events, error lines,
config.yaml and checkpoint records.

Secrets are the values of environment variables named like `*_API_KEY`, `*_TOKEN`, `*_SECRET`,
`*_PASSWORD` (TINKER_API_KEY among them), plus any extra value registered with `add_secret`,
plus credentials in URLs (`scheme://user:pass@host` keeps only `scheme://[redacted]@host`), plus
secret-named URL query parameters (`?token=...`, `&api_key=...`, `sig=`, `X-Amz-Signature=`, ...).

The environment is scanned for secret values once per run (when its logger is made, i.e. when its
config is in force) and whenever `add_secret` registers one, not per event: a scan costs tens of
µs with a few hundred variables, and every structlog event would pay it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 6
"""Shorter values are not treated as secrets: replacing "1" everywhere would garble every line."""

_SECRET_ENV = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD)$", re.IGNORECASE)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<cred>[^/@\s'\"<>]+)@")
_QUERY_SECRET = re.compile(
    r"(?P<lead>[?&;](?:[A-Za-z0-9._-]*[_-])?"
    r"(?:token|key|apikey|secret|password|passwd|pwd|sig|signature|credential|auth|session)=)"
    r"(?P<value>[^&#;\s'\"<>]+)",
    re.IGNORECASE,
)
"""A URL query parameter whose name is, or ends in `_`/`-` plus, a secret word: `token`, `access_token`,
`key`, `api_key`, `api-key`, `sig`, `X-Amz-Signature`, `X-Amz-Credential`, `client_secret`, ..."""
_SECRET_KEY = re.compile(
    r"(^|[_-])(api[_-]?key|apikey|token|secret|password|passwd|credentials?)([_-]|$)", re.IGNORECASE
)
_extra: set[str] = set()


class Secrets:
    """A set of secret values with one compiled pattern for all of them: finding any of N values
    in a text is one regex scan, not N substring searches."""

    def __init__(self, values: Sequence[str]) -> None:
        self.values = sorted(set(values), key=len, reverse=True)  # a secret containing another goes whole
        self._pattern = re.compile("|".join(map(re.escape, self.values))) if self.values else None

    def redact(self, text: str) -> str:
        """`text` with every secret value, URL credential and secret query parameter replaced."""
        if len(text) < MIN_SECRET_LENGTH:  # too short to hold a secret, or a URL with credentials
            return text
        if self._pattern is not None:
            text = self._pattern.sub(REDACTED, text)
        if "://" in text:
            text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
        if "=" in text:
            text = _QUERY_SECRET.sub(lambda m: f"{m['lead']}{REDACTED}", text)
        return text


_cached: Secrets | None = None


def add_secret(value: str | None) -> None:
    """Treat `value` as a secret from now on (e.g. a key read from a file)."""
    if value and len(value) >= MIN_SECRET_LENGTH and value not in _extra:
        _extra.add(value)
        refresh_secrets()


def secret_values() -> list[str]:
    """The current secret values; scans the whole environment."""
    values = {v for k, v in os.environ.items() if _SECRET_ENV.search(k) and v and len(v) >= MIN_SECRET_LENGTH}
    return sorted(values | _extra, key=len, reverse=True)


def current_secrets() -> Secrets:
    """The secrets as the environment holds them now (a fresh scan)."""
    return Secrets(secret_values())


def refresh_secrets() -> Secrets:
    """Scan the environment again for what `cached_secrets` returns (a run's logger calls this when
    it is made; `add_secret` too)."""
    global _cached
    _cached = current_secrets()
    return _cached


def cached_secrets() -> Secrets:
    """The secrets as of the last `refresh_secrets()` (the first call scans): for paths that run per
    event."""
    return refresh_secrets() if _cached is None else _cached


def looks_like_secret_key(key: str) -> bool:
    """Whether a config key name (its last dotted part) names a secret: `api_key`, `hf_token`, ..."""
    return bool(_SECRET_KEY.search(key.split(".")[-1]))


def redact(text: str, secrets: Secrets | None = None) -> str:
    """`text` with every secret value, URL credential and secret query parameter replaced by
    `[redacted]`; `secrets` default: a fresh scan of the environment."""
    if not text:
        return text
    return (secrets or current_secrets()).redact(text)


def leaks(text: str) -> bool:
    return redact(text) != text


def redact_value(value: Any, secrets: Secrets | None = None) -> Any:
    """Redact every string inside nested dicts / lists / tuples (reading the secrets once)."""
    if secrets is None:
        secrets = current_secrets()
    if isinstance(value, str):
        return secrets.redact(value)
    if isinstance(value, Mapping):
        return {k: redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(v, secrets) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_value(v, secrets) for v in value)
    return value


def structlog_processor(logger: Any, method: str, event_dict: Any) -> Any:
    """structlog processor: redact every value of the event (exceptions become redacted text), with
    the secret values read when the run started (`cached_secrets`). Numbers pass untouched."""
    secrets = cached_secrets()
    for key, value in event_dict.items():
        if isinstance(value, (int, float, bool, type(None))):
            continue
        if isinstance(value, BaseException):
            value = f"{type(value).__name__}: {value}"
        elif not isinstance(value, (str, Mapping, list, tuple)):
            value = str(value)
        event_dict[key] = redact_value(value, secrets)
    return event_dict


class RedactingFilter(logging.Filter):
    """A logging filter that rewrites the record's message (and traceback text) redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        return True


_FORMATTER = logging.Formatter()


def redact_record(record: logging.LogRecord) -> None:
    if getattr(record, "_kitchen_redacted", False):
        return
    try:
        message = record.getMessage()
    except Exception:  # a broken format string: keep what logging would show
        message = str(record.msg)
    record.msg, record.args = redact(message), None
    if record.exc_info and not record.exc_text:
        record.exc_text = _FORMATTER.formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)
    record._kitchen_redacted = True


_installed = False
SDK_LOGGERS = ("tinker", "httpx", "httpcore", "asyncio")


def install_logging_filter() -> None:
    """Redact every log record of this process, whichever logger or handler it goes through: the
    record factory redacts at creation, and the filter sits on the root, the SDK loggers, their
    handlers and logging's last-resort handler."""
    global _installed
    if _installed:
        return
    _installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        redact_record(record)
        return record

    logging.setLogRecordFactory(factory)
    redacting = RedactingFilter()
    for name in ("", *SDK_LOGGERS):
        logger = logging.getLogger(name)
        logger.addFilter(redacting)
        for handler in logger.handlers:
            handler.addFilter(redacting)
    if logging.lastResort is not None:
        logging.lastResort.addFilter(redacting)
