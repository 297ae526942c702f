"""The one error base train_core raises for bad input a user can fix (data, loss config,
conversation format). kitchen's own errors derive from it, and the CLI reports any of them as
one clear line with exit code 2."""

from __future__ import annotations


class InvalidInputError(ValueError):
    """Bad input, named precisely in the message (file and line, key, or datum)."""


class DataFormatError(InvalidInputError):
    """A data file that cannot be read, or a malformed record in it: names the file and the
    1-based line (`line` is None when the problem is the file as a whole)."""

    def __init__(self, path: object, line: int | None, detail: str):
        self.path = str(path)
        self.line = line
        self.detail = detail
        where = self.path if line is None else f"{self.path} line {line}"
        super().__init__(f"{where}: {detail}")
