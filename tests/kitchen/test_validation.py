"""`kitchen validate`: wiring plus backend support, checked with no backend call."""

from __future__ import annotations

import pytest

from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError, WiringError
from kitchen.engine.recipe import get_recipe
from kitchen.engine.stage import Stage
from kitchen.engine.validation import validate_recipe
from kitchen.engine.workflow import Workflow


def _not_a_port_method() -> None: ...


class Typo(Stage):
    calls = (_not_a_port_method,)

    async def run(self) -> None: ...


def test_a_call_that_is_no_port_method_is_a_wiring_error() -> None:
    with pytest.raises(WiringError, match=r"stage class Typo declares <function _not_a_port_method.*which is no port"):
        Workflow("w", [Typo()]).validate({}, ())


@pytest.mark.parametrize("name", ["sl_basic", "chat_sl"])
def test_tinker_needs_lora_rank(name: str) -> None:
    recipe = get_recipe(name)
    with pytest.raises(ConfigError, match="trains LoRA adapters only; set lora_rank"):
        validate_recipe(recipe, load_config(recipe.config_cls, None, ["backend=tinker"]))
    workflow = validate_recipe(recipe, load_config(recipe.config_cls, None, ["backend=tinker", "lora_rank=8"]))
    assert any(stage.spec.calls for stage in workflow.stages())


def test_every_builtin_stage_that_uses_a_port_declares_its_calls() -> None:
    recipe = get_recipe("sl_basic")
    workflow = recipe.workflow(load_config(recipe.config_cls))
    for stage in workflow.stages():
        uses = stage.spec.ports or any(read.key.endswith("_client") for read in stage.spec.reads)
        if uses:
            assert stage.spec.calls, f"stage {stage.name!r} uses a backend but declares no calls"
