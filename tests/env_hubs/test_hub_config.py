"""Config errors of `env: verifiers` and `env: openenv`, whether or not their packages are
installed: a missing package names the extra and the command that installs it; an unknown
environment name is refused with a suggestion."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.integrations.hubs.verifiers_env import check_version
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


def installed_verifiers() -> str:
    try:
        return version("verifiers")
    except PackageNotFoundError:
        return ""


@pytest.mark.parametrize("accepted", ["0.3.1", "0.3.9.post1", "0.2.0"])
def test_the_verifiers_03_line_is_accepted(accepted: str) -> None:
    check_version(accepted)


@pytest.mark.parametrize("refused", ["0.4.0", "0.4.0rc1", "0.5.2", "1.0"])
def test_the_verifiers_04_line_is_refused_by_version(refused: str) -> None:
    with pytest.raises(ValueError, match=rf"verifiers {refused} is installed.*pip install 'verifiers>=0\.3\.1,<0\.4'"):
        check_version(refused)


@pytest.mark.skipif(
    not installed_verifiers().startswith("0.4."), reason="the hubs extra's verifiers 0.4 is not installed"
)
def test_env_verifiers_under_the_hubs_extra_is_a_config_error_naming_the_version() -> None:
    """The hubs extra installs verifiers 0.4, whose API env: verifiers does not run: refused before the run."""
    with pytest.raises(ConfigError, match=rf"verifiers {installed_verifiers()} is installed.*verifiers\.v1"):
        load_config(Config, None, ["env=verifiers", "env.environment=my-env"])
