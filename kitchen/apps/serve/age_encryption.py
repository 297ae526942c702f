"""Exported weights encrypted to age recipients (`save_weights_external(age_encryption_recipients=...)`),
as the Tinker API documents: every file encrypted to all recipients and stored with a `.age`
suffix, for `age -d -i IDENTITY` to decrypt. Recipients are native `age1...` keys or SSH public
keys (`ssh-ed25519 ...`, `ssh-rsa ...`); the encryption is the `pyrage` package's (age's Rust
implementation), part of the `serve` extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kitchen.apps.serve.errors import ServeError
from kitchen.apps.serve.refusals import AGE_ENCRYPTION, refuse

MAX_RECIPIENTS = 10
SUFFIX = ".age"


def recipients(keys: list[str]) -> list[Any]:
    """The parsed recipients of a request; a malformed key (or too many) is a 400 naming it."""
    if not keys:
        return []
    try:
        import pyrage
    except ImportError:
        raise refuse(AGE_ENCRYPTION) from None
    if len(keys) > MAX_RECIPIENTS:
        raise ServeError(f"age_encryption_recipients: at most {MAX_RECIPIENTS} recipients, got {len(keys)}")
    parsed = []
    for key in keys:
        kind = pyrage.ssh.Recipient if key.startswith("ssh-") else pyrage.x25519.Recipient
        try:
            parsed.append(kind.from_str(key))
        except pyrage.RecipientError as exc:
            raise ServeError(
                f"age_encryption_recipients: {key[:24]!r}... is not an age or SSH public key ({exc})"
            ) from None
    return parsed


def encrypt_folder(folder: Path, to: list[Any]) -> None:
    """Replace every file under `folder` by its encryption to `to`, named with the `.age` suffix."""
    import pyrage

    for file in sorted(f for f in folder.rglob("*") if f.is_file()):
        file.with_name(file.name + SUFFIX).write_bytes(pyrage.encrypt(file.read_bytes(), to))
        file.unlink()
