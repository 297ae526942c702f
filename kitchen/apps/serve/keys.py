"""API keys: who may call the server, and which records each caller owns.

The keys file holds one key per line (blank lines and `#` comments ignored). The SDK only sends
keys that start with `tml-`, so every key must. A key is checked against every listed key with
`hmac.compare_digest` (constant time, no early exit), and is never logged: records carry the
owner's digest, not the key. Without a keys file (loopback only) any `tml-` key is accepted and
still owns what it creates.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from kitchen.engine.errors import ConfigError

KEY_PREFIX = "tml-"


class Unauthorized(Exception):
    """A missing or unknown API key (HTTP 401)."""


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
    def __init__(self, keys: tuple[str, ...] | None) -> None:
        self._keys = tuple(k.encode() for k in keys) if keys else None

    def owner(self, presented: str | None) -> str:
        """The caller's owner id, or Unauthorized."""
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
