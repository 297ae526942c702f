"""Saved noop weights behind `noop://` paths: small JSON files, or memory when no directory is given.

A path looks like `noop://training-0/state/000020`. With a checkpoint directory it names the file
`<dir>/training-0/state/000020.json`, so a fresh backend on the same directory can resume a run;
without one, saves live only as long as the backend.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from adapters.noop.pseudo_logprobs import PseudoWeights
from kitchen.engine.errors import KitchenError

SCHEME = "noop://"
SaveKind = Literal["state", "sampler_weights"]
_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def _is_safe(part: str) -> bool:
    """A path part that cannot escape its directory."""
    return bool(_SAFE_NAME.match(part)) and part not in {".", ".."}


@dataclass(frozen=True)
class SavedWeights:
    """What a save holds: the pseudo-weights and the LoRA rank of the client that saved them."""

    kind: SaveKind
    weights: PseudoWeights
    lora_rank: int | None

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "weights": asdict(self.weights), "lora_rank": self.lora_rank})

    @classmethod
    def from_json(cls, text: str, where: str) -> SavedWeights:
        try:
            raw = json.loads(text)
            return cls(raw["kind"], PseudoWeights(**raw["weights"]), raw["lora_rank"])
        except (ValueError, KeyError, TypeError) as exc:
            raise KitchenError(f"{where}: not a noop checkpoint ({exc!r})") from exc


class CheckpointStore:
    """Writes and reads `SavedWeights` by `noop://` path."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._in_memory: dict[str, SavedWeights] = {}

    def path_for(self, owner: str, kind: SaveKind, name: str) -> str:
        """The path a save of `name` by `owner` gets; checked up front so a bad name fails at the call."""
        if not _is_safe(name):
            raise KitchenError(f"checkpoint name {name!r} must be letters, digits, '.', '_' or '-'")
        return f"{SCHEME}{owner}/{kind}/{name}"

    def save(self, path: str, saved: SavedWeights) -> None:
        """Store `saved` at `path` (from `path_for`), replacing an earlier save there."""
        if self.directory is None:
            self._in_memory[path] = saved
            return
        file = self._file(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_name(file.name + ".tmp")
        tmp.write_text(saved.to_json(), encoding="utf-8")
        os.replace(tmp, file)

    def load(self, path: str, kind: SaveKind) -> SavedWeights:
        """The save at `path`, which must be of `kind`; a clear error when it is not there."""
        if not path.startswith(SCHEME):
            raise KitchenError(f"noop backend cannot load {path!r}: not a {SCHEME} path")
        if self.directory is None:
            if path not in self._in_memory:
                raise KitchenError(f"no noop checkpoint at {path!r} (this backend keeps saves in memory)")
            saved = self._in_memory[path]
        else:
            file = self._file(path)
            if not file.is_file():
                raise KitchenError(f"no noop checkpoint at {path!r} (looked for {file})")
            saved = SavedWeights.from_json(file.read_text(encoding="utf-8"), str(file))
        if saved.kind != kind:
            raise KitchenError(f"{path!r} holds {saved.kind}, but {kind} was asked for")
        return saved

    def files(self, path: str) -> list[Path]:
        """The file a save at `path` lives in, when saves go to a directory."""
        if self.directory is None or not path.startswith(SCHEME):
            return []
        file = self._file(path)
        return [file] if file.is_file() else []

    def _file(self, path: str) -> Path:
        assert self.directory is not None
        parts = path.removeprefix(SCHEME).split("/")
        if len(parts) != 3 or not all(_is_safe(p) for p in parts):
            raise KitchenError(f"malformed noop checkpoint path {path!r}: expected noop://<client>/<kind>/<name>")
        owner, kind, name = parts
        return self.directory / owner / kind / f"{name}.json"
