"""Up-front checks for the tinker backend: the SDK is installed and the API key is set.

Both are checked before any work starts, so a run fails in its first second with one clear
message rather than at the first remote call. The key is read only from the environment and
is never put in a message, a repr or a log.
"""

from __future__ import annotations

import importlib
import os

from kitchen.engine.errors import ConfigError

API_KEY_ENV = "TINKER_API_KEY"
INSTALL_HINT = "pip install 'kitchen[tinker]'"


def _sdk_problem() -> str | None:
    try:
        importlib.import_module("tinker")
    except ImportError as exc:
        return f"the tinker SDK is not installed ({exc}); install it with {INSTALL_HINT}"
    return None


def _key_problem() -> str | None:
    if os.environ.get(API_KEY_ENV):
        return None
    return (
        f"the environment variable {API_KEY_ENV} is not set; the tinker backend reads its API key "
        "only from there (never from a config file)"
    )


def require_sdk() -> None:
    """Raise a ConfigError if the tinker SDK cannot be imported."""
    if problem := _sdk_problem():
        raise ConfigError(f"backend tinker: {problem}")


def check_available() -> None:
    """Raise one ConfigError naming everything missing (SDK, API key) for `backend: tinker`."""
    problems = [p for p in (_sdk_problem(), _key_problem()) if p is not None]
    if problems:
        raise ConfigError("backend tinker: " + "; ".join(problems))


def read_api_key() -> str:
    """The API key from the environment, after `check_available` has vouched for it."""
    check_available()
    return os.environ[API_KEY_ENV]
