"""API keys: who may call the server, and which records each caller owns.

The keys file holds one key per line (blank lines and `#` comments ignored). The SDK only sends
keys that start with `tml-`, so every key must. A key is checked against every listed key with
`hmac.compare_digest` (constant time, no early exit), and is never logged: records carry the
owner's digest, not the key. Without a keys file (loopback only) any `tml-` key is accepted and
still owns what it creates.

The SDK may also exchange its key for a short-lived JWT (`/api/v1/auth/token`, which this server
offers: `RestClient.whoami` reads its claims) and send that instead; a JWT this server signed
stands for the key's owner until it expires. An expired or foreign one is a 401 marked
`invalid_token`, on which the SDK fetches a new one.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Any

from kitchen.apps.serve.signing import API_AUDIENCE, ServerSecret
from kitchen.engine.errors import ConfigError

KEY_PREFIX = "tml-"
JWT_PREFIX = "eyJ"
JWT_LIFETIME_S = 3600.0
ORGANIZATION = "kitchen-serve"
"""The organization every caller of a kitchen server belongs to (`whoami`'s org_urn)."""


class Unauthorized(Exception):
    """A missing or unknown API key (HTTP 401); `invalid_token`: a JWT to be replaced."""

    def __init__(self, message: str, invalid_token: bool = False) -> None:
        super().__init__(message)
        self.invalid_token = invalid_token


def read_keys_file(path: Path) -> tuple[str, ...]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"api keys file {path}: cannot read it ({exc})") from None
    keys = []
    for number, line in enumerate(lines, 1):
        key = line.strip()
        if not key or key.startswith("#"):
            continue
        if not key.startswith(KEY_PREFIX) or len(key) < len(KEY_PREFIX) + 8:
            raise ConfigError(
                f"api keys file {path} line {number}: a key must start with {KEY_PREFIX!r} "
                "(the SDK refuses others) and have at least 8 more characters"
            )
        keys.append(key)
    if not keys:
        raise ConfigError(f"api keys file {path}: no keys in it")
    return tuple(keys)


def owner_of(key: str) -> str:
    """The records' owner id for `key`: a digest, so no record or log holds the key."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


class KeyCheck:
    def __init__(self, keys: tuple[str, ...] | None, secret: ServerSecret | None = None) -> None:
        self._keys = tuple(k.encode() for k in keys) if keys else None
        self._secret = secret

    @property
    def secret(self) -> ServerSecret:
        if self._secret is None:
            raise RuntimeError("this key check was built without the store's secret")
        return self._secret

    def token(self, presented: str | None) -> str:
        """A JWT for the owner of API key `presented` (the SDK's key exchange)."""
        owner = self.owner(presented)
        if self._secret is None:
            raise Unauthorized("this server issues no tokens")
        claims: dict[str, Any] = {"sub": f"tml:user:{owner}", "org_id": ORGANIZATION, "owner": owner}
        return self._secret.mint(claims, API_AUDIENCE, JWT_LIFETIME_S)

    def owner(self, presented: str | None) -> str:
        """The caller's owner id, or Unauthorized."""
        if presented and presented.startswith(JWT_PREFIX) and self._secret is not None:
            claims = self._secret.read(presented, API_AUDIENCE)
            if claims is None or not isinstance(claims.get("owner"), str):
                raise Unauthorized("expired or unknown token (exchange the API key for a new one)", invalid_token=True)
            return str(claims["owner"])
        if not presented or not presented.startswith(KEY_PREFIX):
            raise Unauthorized("missing or malformed API key (send X-API-Key: tml-...)")
        if self._keys is not None:
            candidate = presented.encode()
            matched = False
            for key in self._keys:
                matched |= hmac.compare_digest(candidate, key)
            if not matched:
                raise Unauthorized("invalid API key")
        return owner_of(presented)
