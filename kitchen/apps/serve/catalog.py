"""The models file: the names programs ask for, mapped to what the backend loads.

A YAML mapping, one model per line: `Qwen/Qwen3-8B: /models/qwen3-8b` (a local folder) or
`tiny: tiny` (one of kitchen's embedded models: `tiny`, `tiny32`, `tiny64k`, `tiny-vl`). Without a file the
server offers `tiny` only. The name a program uses is what `get_server_capabilities` lists and
what training runs record.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from kitchen.engine.config.yaml_bounded import load_yaml
from kitchen.engine.errors import ConfigError

TINY = "tiny"
EMBEDDED = frozenset({TINY, "tiny32", "tiny64k", "tiny-vl"})
"""The backends' embedded models (`adapters.common.tiny`), which a models file may name as they are."""


class UnknownModel(ConfigError):
    """A model name the server does not serve (HTTP 400)."""


class ModelCatalog:
    def __init__(self, models: dict[str, str]) -> None:
        self.models = dict(models)

    def backend_model(self, name: str) -> str:
        """What the backend loads for `name`; an unknown name raises UnknownModel listing the served ones."""
        if name not in self.models:
            raise UnknownModel(
                f"unknown base model {name!r}: this server serves {', '.join(sorted(self.models))} "
                "(add it to the models file given with --models)"
            )
        return self.models[name]


def read_models_file(path: Path | None) -> ModelCatalog:
    """The catalog from `path` (None: `tiny` only); a malformed file is a ConfigError naming it."""
    if path is None:
        return ModelCatalog({TINY: TINY})
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"models file {path}: cannot read it ({exc})") from None
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"models file {path}: expected a mapping of model name to local folder or 'tiny'")
    models: dict[str, str] = {}
    for name, target in raw.items():
        if not isinstance(name, str) or not isinstance(target, str) or not target:
            embedded = ", ".join(sorted(EMBEDDED))
            raise ConfigError(
                f"models file {path}: entry {name!r}: the value must be a local folder or an embedded model "
                f"({embedded})"
            )
        if target not in EMBEDDED:
            folder = Path(target).expanduser()
            if not folder.is_absolute():
                folder = path.parent / folder
            if not folder.is_dir():
                raise ConfigError(f"models file {path}: entry {name!r}: {folder} is not a folder")
            target = str(folder.resolve())
        models[name] = target
    return ModelCatalog(models)
