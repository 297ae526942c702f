"""Decide when a sampled sequence has hit one of its stop conditions."""

from __future__ import annotations

from collections.abc import Sequence

from kitchen.errors import ConfigError
from kitchen.ports import Tokenizer
from train_core.types import StopCondition

_MAX_BYTES_PER_CHAR = 4
"""UTF-8 needs at most 4 bytes a character and every token is at least one byte (or one
character), so a stop string of n characters lies within the last 4n tokens."""


class StopMatcher:
    """Stop token ids, or stop strings searched in the decoded tail of the sampled tokens."""

    def __init__(self, stop: StopCondition | None, tokenizer: Tokenizer) -> None:
        conditions: list[object] = list(stop or [])
        if all(isinstance(s, str) for s in conditions):
            self._strings = [s for s in conditions if isinstance(s, str)]
            self._token_ids: frozenset[int] = frozenset()
        elif all(isinstance(s, int) and not isinstance(s, bool) for s in conditions):
            self._strings = []
            self._token_ids = frozenset(s for s in conditions if isinstance(s, int))
        else:
            raise ConfigError(f"sampling stop must be all strings or all token ids, got {conditions!r}")
        if any(not s for s in self._strings):
            raise ConfigError("sampling stop strings must be non-empty")
        self._tokenizer = tokenizer
        self._window = _MAX_BYTES_PER_CHAR * max((len(s) for s in self._strings), default=0)

    def is_done(self, tokens: Sequence[int]) -> bool:
        """True when the last token completes a stop condition; checked after every new token, so
        a stop string found in the tail can only have been completed by that last token."""
        if tokens and tokens[-1] in self._token_ids:
            return True
        if not self._strings:
            return False
        tail = self._tokenizer.decode(tokens[-self._window :], skip_special_tokens=False)
        return any(s in tail for s in self._strings)
