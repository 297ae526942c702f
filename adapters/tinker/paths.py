"""`tinker://` checkpoint paths: what the service saves to and the only thing it can load."""

from __future__ import annotations

from kitchen.engine.errors import ConfigError

TINKER_SCHEME = "tinker://"


def require_tinker_path(path: str, role: str) -> str:
    """Return `path` if it is a tinker:// path; otherwise a ConfigError naming `role` and the path."""
    if not path.startswith(TINKER_SCHEME):
        raise ConfigError(
            f"{role}: the tinker backend loads only {TINKER_SCHEME} checkpoints saved by the service, got {path!r}"
        )
    return path
