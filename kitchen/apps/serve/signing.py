"""Tokens the server signs: the short-lived JWTs the SDK exchanges its API key for, and the
download links of exported weights and traces.

Both are HS256 JWTs (header.claims.signature, base64url) under one secret kept in the store
folder (created on first start, mode 0600), so links stay valid across a restart until they
expire. The `aud` claim keeps the two apart: a download link is not a credential, and a
credential does not open files.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

API_AUDIENCE = "api"
DOWNLOAD_AUDIENCE = "download"
_HEADER = {"alg": "HS256", "typ": "JWT"}


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ServerSecret:
    """The store's signing key."""

    def __init__(self, folder: Path) -> None:
        path = folder / "server-secret"
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(secrets.token_hex(32))
        self._key = bytes.fromhex(path.read_text(encoding="utf-8").strip())

    def mint(self, claims: dict[str, Any], audience: str, lifetime_s: float) -> str:
        """A token carrying `claims`, valid for `lifetime_s` seconds from now."""
        now = int(time.time())
        body = {**claims, "aud": audience, "iat": now, "exp": now + int(lifetime_s)}
        signing_input = f"{_b64(json.dumps(_HEADER).encode())}.{_b64(json.dumps(body).encode())}"
        signature = hmac.new(self._key, signing_input.encode(), hashlib.sha256).digest()
        return f"{signing_input}.{_b64(signature)}"

    def read(self, token: str, audience: str) -> dict[str, Any] | None:
        """The claims of a valid, unexpired token for `audience`; None for anything else."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            expected = hmac.new(self._key, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
            if not hmac.compare_digest(expected, _unb64(parts[2])):
                return None
            claims = json.loads(_unb64(parts[1]))
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(claims, dict) or claims.get("aud") != audience:
            return None
        if not isinstance(claims.get("exp"), int) or claims["exp"] <= time.time():
            return None
        return claims
