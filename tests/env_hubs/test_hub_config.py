"""Config errors of `env: verifiers` and `env: openenv`, whether or not their packages are
installed: a missing package names the extra and the command that installs it; an unknown
environment name is refused with a suggestion."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.integrations.hubs.verifiers_env import check_version
from recipes.env_rl import Config


@pytest.mark.parametrize(
    ("env", "package", "named"),
    [
        ("verifiers", "verifiers", "env.taskset=my-taskset"),
        ("openenv", "openenv", "env.environment=my_env:MyEnvironment"),
    ],
)
def test_a_missing_hub_package_is_a_config_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, env: str, package: str, named: str
) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # import machinery: "not installed"
    with pytest.raises(ConfigError, match=rf"needs the '{package}' package.*kitchen\[hubs\].*setup_hubs\.sh"):
        load_config(Config, None, [f"env={env}", named])


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


@pytest.mark.parametrize("accepted", ["0.4.0", "0.4.0rc1", "0.4.3.post1"])
def test_the_verifiers_04_line_is_accepted(accepted: str) -> None:
    check_version(accepted)


@pytest.mark.parametrize("refused", ["0.3.1", "0.3.9.post1", "0.5.2", "1.0"])
def test_other_verifiers_lines_are_refused_by_version(refused: str) -> None:
    with pytest.raises(ValueError, match=rf"verifiers {refused} is installed.*pip install 'verifiers>=0\.4,<0\.5'"):
        check_version(refused)


@pytest.mark.skipif(not installed_verifiers(), reason="verifiers is not installed (scripts/setup_hubs.sh)")
def test_env_verifiers_on_verifiers_03_is_a_config_error_naming_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """verifiers 0.3's API (load_environment, rubrics) is gone from 0.4: refused before the run."""
    monkeypatch.setattr("kitchen.integrations.hubs.verifiers_env.version", lambda package: "0.3.9")
    with pytest.raises(ConfigError, match=r"env\.taskset.*verifiers\.v1.*verifiers 0\.3\.9 is installed"):
        load_config(Config, None, ["env=verifiers", "env.taskset=my-taskset"])


@pytest.mark.skipif(not installed_verifiers(), reason="verifiers is not installed (scripts/setup_hubs.sh)")
def test_a_package_index_that_is_not_a_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"env\.package_index.*is not a folder.*setup_hubs\.sh"):
        load_config(Config, None, ["env=verifiers", "env.taskset=harbor", f"env.package_index={tmp_path / 'missing'}"])


@pytest.mark.skipif(not installed_verifiers(), reason="verifiers is not installed (scripts/setup_hubs.sh)")
def test_env_verifiers_without_uv_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kitchen.integrations.hubs.verifiers_env.shutil.which", lambda name, path=None: None)
    with pytest.raises(ConfigError, match=r"env\.taskset.*with uv, not installed: pip install uv"):
        load_config(Config, None, ["env=verifiers", "env.taskset=harbor"])


@pytest.mark.skipif(not installed_verifiers(), reason="verifiers is not installed (scripts/setup_hubs.sh)")
def test_taskset_args_its_config_lacks_are_a_config_error() -> None:
    """verifiers_tasksets.py (beside this file) has `tools` and `hints`, not `colour`."""
    overrides = ["env=verifiers", "env.taskset=verifiers_tasksets", "env.taskset_args.colour=red"]
    fit = r"taskset_args do not fit taskset 'verifiers_tasksets'.s config: colour: Extra inputs"
    with pytest.raises(ConfigError, match=fit):
        load_config(Config, None, overrides)
