"""Decide when a sampled sequence has hit one of its stop conditions."""

from __future__ import annotations

import weakref
from collections.abc import Sequence

from kitchen.engine.errors import ConfigError
from kitchen.engine.ports import Tokenizer
from train_core.types import StopCondition

_MAX_BYTES_PER_CHAR = 4
"""UTF-8 needs at most 4 bytes a character and every token is at least one byte (or one
character), so a stop string of n characters lies within the last 4n tokens."""

_TOKEN_TEXTS: weakref.WeakKeyDictionary[Tokenizer, dict[int, str]] = weakref.WeakKeyDictionary()
"""Each tokenizer's decoded single tokens, shared by every matcher (one per sample request)."""


def _token_text(tokenizer: Tokenizer, token: int) -> str:
    try:
        texts = _TOKEN_TEXTS.setdefault(tokenizer, {})
    except TypeError:  # a tokenizer that takes no weak reference goes uncached
        return tokenizer.decode([token], skip_special_tokens=False)
    text = texts.get(token)
    if text is None:
        text = texts[token] = tokenizer.decode([token], skip_special_tokens=False)
    return text


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
        # A stop string completed by the last token ends in a character that token decodes to.
        # Decoding a token alone can drop a leading space (SentencePiece) or split a character
        # (byte-level pieces: U+FFFD), so whitespace endings and such tokens always decode the tail.
        self._last_chars = frozenset(s[-1] for s in self._strings)
        self._prefilter = not any(c.isspace() for c in self._last_chars)

    def is_done(self, tokens: Sequence[int]) -> bool:
        """True when the last token completes a stop condition; checked after every new token, so
        a stop string found in the tail can only have been completed by that last token."""
        if tokens and tokens[-1] in self._token_ids:
            return True
        if not self._strings:
            return False
        if self._prefilter and tokens:
            text = _token_text(self._tokenizer, tokens[-1])
            if text and "\ufffd" not in text and not any(c in text for c in self._last_chars):
                return False
        tail = self._tokenizer.decode(tokens[-self._window :], skip_special_tokens=False)
        return any(s in tail for s in self._strings)
