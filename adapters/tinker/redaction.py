"""Keeping the API key out of every message: the adapter's view of `kitchen.engine.secrets`.

The key given here is registered with kitchen's one redaction filter, which also covers every
`*_API_KEY` / `*_TOKEN` environment variable and credentials in URLs.
"""

from __future__ import annotations

from kitchen.engine import secrets

REDACTED = secrets.REDACTED


class Redactor:
    """Replaces secrets in text bound for a message or log; its repr never shows the key."""

    def __init__(self, secret: str | None = None) -> None:
        self._secret = secret or None
        secrets.add_secret(self._secret)

    def __call__(self, text: str) -> str:
        text = secrets.redact(text)
        return text.replace(self._secret, REDACTED) if self._secret else text

    def leaks(self, text: str) -> bool:
        """Whether `text` contains a secret (so an exception carrying it must not be chained)."""
        return (self._secret is not None and self._secret in text) or secrets.leaks(text)

    def __repr__(self) -> str:
        return "Redactor(<hidden>)"
