"""The error a finally failed Tinker request raises: it names the call; the runner adds the stage."""

from __future__ import annotations

from typing import NoReturn

from adapters.tinker.redaction import Redactor
from kitchen.engine.errors import StageError


class TinkerCallError(StageError):
    """A Tinker service request that failed after every retry, e.g. `tinker optim_step failed: ...`."""

    def __init__(self, call: str, detail: str) -> None:
        super().__init__(f"tinker {call} failed{detail}")
        self.call = call


def raise_call_error(call: str, exc: BaseException, redactor: Redactor, attempts: int = 1) -> NoReturn:
    """Raise a TinkerCallError for `exc`; the SDK exception is chained unless it carries the key."""
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    error = TinkerCallError(call, f"{tries}: {type(exc).__name__}: {redactor(str(exc))}")
    if redactor.leaks(str(exc)) or redactor.leaks(repr(exc)):
        raise error from None
    raise error from exc
