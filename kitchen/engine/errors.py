"""User-facing errors. The CLI prints these as one line and exits 2 (bad input) or 1 (`RuntimeFailure`:
the machinery under a run broke); anything else is a bug."""

from __future__ import annotations

from pathlib import Path

from train_core.errors import InvalidInputError


class KitchenError(InvalidInputError):
    """Bad input a user can fix: config, data, wiring. The message names what is wrong."""


class ConfigError(KitchenError):
    pass


class DataError(KitchenError):
    pass


class WiringError(KitchenError):
    """A workflow whose stages do not fit together, detected when it is built."""


class StageError(KitchenError):
    """A user-fixable failure raised while a stage runs; the runner prefixes the stage name."""


class RuntimeFailure(KitchenError):
    """Not bad input: what a run stands on broke under it (a lost node, a dead worker). The message
    names what and where; the CLI exits 1 (not 2, which says "fix your input"), and rerunning the
    same command resumes from the last checkpoint."""


class RunDirError(KitchenError):
    """A log_path that cannot hold this run (locked, not a run dir, unwritable, ...)."""


def run_dir_gone(path: Path) -> RunDirError:
    """The error of a run whose directory disappeared under it (written by the run dir and the metrics)."""
    return RunDirError(
        f"log_path {path}: the run directory was deleted or replaced while the run was going; its metrics, "
        "checkpoints and events are gone, so the run stops here (start it again, with a new log_path)"
    )
