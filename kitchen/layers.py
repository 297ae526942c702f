"""The layers of the repository and of kitchen inside it, from the bottom up: what may import what.

Declared once, here: `tests/architecture` enforces it on every import (inside functions and under
`TYPE_CHECKING` too) and `docs/explanation/layout.md` is generated from it
(`python -m docs.gen.layout --write`). A package's one-line purpose is its docstring's first
sentence.
"""

from __future__ import annotations

REPOSITORY: dict[str, tuple[str, ...]] = {
    "train_core": (),
    "sandbox": ("train_core",),
    "kitchen": ("train_core",),
    "adapters": ("train_core", "kitchen.engine"),
    "recipes": ("train_core", "kitchen", "sandbox"),
}
"""Each top-level package and what it may import of the others (a prefix allows what is below it).
Adapters use only the engine (its ports, errors and backend registry) and never import each
other: `adapters.common` is the one package they share."""

KITCHEN: tuple[tuple[str, ...], ...] = (
    ("kitchen.engine",),
    ("kitchen.families",),
    ("kitchen.apps", "kitchen.testing"),
    ("kitchen.integrations",),
)
"""kitchen's packages, bottom up: a package imports its own layer and the layers below, never one
above (apps -> families -> engine; the integrations use the apps' OpenAI-compatible server)."""

LOOSE_MODULES_MAX = 15
"""Modules directly in `kitchen/`: the public surface and little else; the rest lives in a layer."""

PUBLIC_MODULES: tuple[str, ...] = (
    "kitchen",
    "kitchen.families.common",
    "kitchen.families.supervised",
    "kitchen.families.preference",
    "kitchen.families.preference.rlhf",
    "kitchen.families.rl",
    "kitchen.families.distillation",
    "kitchen.families.evaluation",
    "kitchen.integrations.agents",
    "kitchen.integrations.hubs",
    "kitchen.integrations.tools",
)
"""What recipes and users' own code import of kitchen: `kitchen` (the engine's public names, the
shared settings) and each family's or integration's public module, whose names are re-exported
from the modules below it. (RLHF is a module of its own: it brings the RL family in, which DPO
users need not import.)"""

RECIPE_IMPORTS_MAX = 12
"""Distinct kitchen modules imported across `recipes/` and `examples/`: recipes stay thin."""

TOP_LEVEL_KEYS_MAX = 30
"""Top-level config keys of any recipe: the run's own keys, then one per section."""


def kitchen_layer(module: str) -> int | None:
    """The index in `KITCHEN` of the layer holding `module`, or None outside every layer."""
    for index, packages in enumerate(KITCHEN):
        if any(module == package or module.startswith(package + ".") for package in packages):
            return index
    return None
