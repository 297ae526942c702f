"""Config errors of `env: verifiers` and `env: openenv`, whether or not their packages are
installed: a missing package names the extra and the command that installs it; an unknown
environment name is refused with a suggestion."""

from __future__ import annotations

import sys

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from recipes.env_rl import Config


@pytest.mark.parametrize(("env", "package"), [("verifiers", "verifiers"), ("openenv", "openenv")])
def test_a_missing_hub_package_is_a_config_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, env: str, package: str
) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # import machinery: "not installed"
    with pytest.raises(ConfigError, match=rf"needs the '{package}' package.*kitchen\[hubs\].*setup_hubs\.sh"):
        load_config(Config, None, [f"env={env}", "env.environment=my_env:MyEnvironment"])


def test_an_unknown_env_name_is_a_config_error_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match="verifiers"):
        load_config(Config, None, ["env=verifier"])


def test_an_environment_must_be_named() -> None:
    with pytest.raises(ConfigError, match=r"env\.environment"):
        load_config(Config, None, ["env=openenv"])
