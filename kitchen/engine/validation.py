"""Static checks of a recipe: config, workflow wiring and backend support, with no backend call."""

from __future__ import annotations

from kitchen.engine.backends import get_backend_spec
from kitchen.engine.config.run import RunConfig
from kitchen.engine.errors import ConfigError
from kitchen.engine.recipe import Recipe
from kitchen.engine.workflow import Workflow, WorkflowBuilder, check_sections, state_types

BOUND_PORTS = ("service",)


def backend_problems(workflow: Workflow, config: RunConfig) -> list[str]:
    """What the configured backend cannot run of the workflow, as its registered spec says: each
    call a stage makes that it lacks (naming the stage), the loss, the LoRA requirement."""
    spec = get_backend_spec(config.backend)
    problems = [
        f"stage {stage.name!r} calls {call}, which it does not support"
        for stage in workflow.stages()
        for call in stage.spec.calls
        if spec.supported_calls is not None and call not in spec.supported_calls
    ]
    return problems + spec.problems([], config.builtin_loss_fns(), config.lora_rank, config.entropy_keys())


def validate_recipe(recipe: Recipe, config: RunConfig) -> Workflow:
    """Build the workflow, check its wiring and the config sections its stages read against the
    recipe's initial state and config class, and check that the configured backend supports
    every call its stages make. Raises a KitchenError on a problem."""
    if isinstance(recipe.workflow, WorkflowBuilder):
        reader = f"recipe {recipe.name!r}'s workflow builder"
        check_sections(((reader, section) for section in recipe.workflow.sections), type(config))
    workflow = recipe.workflow(config)
    workflow.validate(state_types(recipe.initial_state(config)), BOUND_PORTS, type(config))
    problems = backend_problems(workflow, config)
    if problems:
        raise ConfigError(f"backend {config.backend!r} cannot run recipe {recipe.name!r}: " + "; ".join(problems))
    return workflow
