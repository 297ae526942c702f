"""The Tinker SDK's [T, K] cross-entropy targets on kitchen serve: `train_core.topk_targets`'s
expansion, with a bad grid answered as a WireError (a 4xx naming the datum)."""

from __future__ import annotations

from kitchen.apps.serve.wire import WireError
from train_core.errors import InvalidInputError
from train_core.topk_targets import Expanded
from train_core.topk_targets import expand_2d_targets as expand
from train_core.types import Datum


def expand_2d_targets(data: list[Datum], loss_fn: str) -> Expanded | None:
    """`data` with every [T, K] cross-entropy datum split into K; None when none is [T, K]."""
    try:
        return expand(data, loss_fn)
    except InvalidInputError as exc:
        raise WireError(str(exc)) from None
