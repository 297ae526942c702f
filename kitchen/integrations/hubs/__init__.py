"""Environments published for other frameworks, as kitchen RL environments (`kitchen.envs`):
`verifiers` 0.4 (its tasksets' tasks as prompts, their rewards) and OpenEnv (gym-style servers).
Their packages are optional: `pip install 'kitchen[hubs]'` (or `bash scripts/setup_hubs.sh`)."""

from __future__ import annotations

import importlib.util

INSTALL = "pip install 'kitchen[hubs]' (or: bash scripts/setup_hubs.sh)"


def require(package: str, env: str) -> None:
    """A ValueError naming the extra to install when `package` is absent (a config error)."""
    if importlib.util.find_spec(package) is None:
        raise ValueError(f"env {env} needs the {package!r} package, which is not installed: {INSTALL}")
