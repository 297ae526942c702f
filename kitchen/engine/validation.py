"""Static checks of a recipe: config, workflow wiring and backend support, with no backend call."""

from __future__ import annotations

from typing import Any

from kitchen.engine.backends import get_backend_spec
from kitchen.engine.errors import ConfigError
from kitchen.engine.recipe import Recipe
from kitchen.engine.workflow import Workflow, check_config_keys, state_types

BOUND_PORTS = ("service",)


def backend_problems(workflow: Workflow, config: Any) -> list[str]:
    """What the configured backend cannot run of the workflow, as its registered spec says: each
    call a stage makes that it lacks (naming the stage), the loss, the LoRA requirement."""
    spec = get_backend_spec(config.backend)
    problems = [
        f"stage {stage.name!r} calls {call}, which it does not support"
        for stage in workflow.stages()
        for call in stage.spec.calls
        if spec.supported_calls is not None and call not in spec.supported_calls
    ]
    builtin_loss_fns = getattr(config, "builtin_loss_fns", None)  # RL: the custom route may take the loss
    loss_fn = getattr(config, "loss_fn", None)
    loss_fns = builtin_loss_fns() if builtin_loss_fns is not None else [loss_fn] if loss_fn else []
    entropy_bonus = getattr(config, "entropy_coeff", 0.0) > 0
    return problems + spec.problems([], loss_fns, config.lora_rank, entropy_bonus)


def validate_recipe(recipe: Recipe, config: Any) -> Workflow:
    """Build the workflow, check its wiring and the config keys its stages read against the
    recipe's initial state and config class, and check that the configured backend supports
    every call its stages make. Raises a KitchenError on a problem."""
    builder_keys = getattr(recipe.workflow, "config_keys", ())
    check_config_keys(((f"recipe {recipe.name!r}'s workflow builder", key) for key in builder_keys), type(config))
    workflow = recipe.workflow(config)
    workflow.validate(state_types(recipe.initial_state(config)), BOUND_PORTS, type(config))
    problems = backend_problems(workflow, config)
    if problems:
        raise ConfigError(f"backend {config.backend!r} cannot run recipe {recipe.name!r}: " + "; ".join(problems))
    return workflow
