"""Stop strings: the matcher's shortcut (skip the tail decode when the last token cannot end any
stop string) finds the same first stop as decoding the tail after every token, on the tiny model's
byte-level BPE tokenizer and on a SentencePiece-style one (decoding a token alone drops its
leading space)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as RawTokenizer
from tokenizers import decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from adapters.common.stop_matcher import StopMatcher
from adapters.common.tiny import TINY_MODEL_NAME
from adapters.common.tokenizer import load_tokenizer
from kitchen.engine.ports import Tokenizer

TINY = load_tokenizer(TINY_MODEL_NAME)
TINY_IDS = TINY.encode("The cat sat. Ünïcødé → ok!\n\nUser: 12 + 30 = 42, é 中文 ", add_special_tokens=False)


def _sentencepiece_style() -> PreTrainedTokenizerFast:
    words = ["<unk>", "▁the", "▁cat", "▁sat", ".", "▁", "a", "t", "▁.", "é", "!", "▁User", ":", "\n"]
    raw = RawTokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(tokenizer_object=raw)


SENTENCEPIECE = cast(Tokenizer, _sentencepiece_style())
TOKENIZERS: dict[str, tuple[Tokenizer, list[int]]] = {
    "byte_level_bpe": (TINY, sorted(set(TINY_IDS))),
    "sentencepiece_style": (SENTENCEPIECE, list(range(1, 14))),
}


def first_stop(tokens: Sequence[int], is_done: object) -> int | None:
    """The index at which a sampler checking after every token would stop."""
    for end in range(1, len(tokens) + 1):
        if is_done(tokens[:end]):  # type: ignore[operator]
            return end - 1
    return None


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_shortcut_stops_where_decoding_every_tail_stops(name: str, data: st.DataObject) -> None:
    tokenizer, ids = TOKENIZERS[name]
    tokens = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=30))
    # stop strings cut from the decoded text (so they occur), ending on spaces or not
    text = tokenizer.decode(tokens, skip_special_tokens=False)
    start = data.draw(st.integers(0, max(len(text) - 1, 0)))
    stop = text[start : start + data.draw(st.integers(1, 6))] or "x"
    others = data.draw(st.lists(st.sampled_from(["t.", " ", "é", "!", "zz"]), max_size=2))
    stops = [stop, *others]
    matcher = StopMatcher(stops, tokenizer)
    window = 4 * max(map(len, stops))

    def decoded_tail_has_a_stop(prefix: Sequence[int]) -> bool:
        tail = tokenizer.decode(list(prefix[-window:]), skip_special_tokens=False)
        return any(s in tail for s in stops)

    assert first_stop(tokens, matcher.is_done) == first_stop(tokens, decoded_tail_has_a_stop)


def test_a_sentencepiece_token_decoded_alone_loses_its_space_yet_completes_a_stop() -> None:
    """'▁the' decodes alone to 'the': a stop ending in that space is still found (the shortcut is
    off for whitespace endings), and one ending in 'e' is found by the token's own text."""
    the, cat = SENTENCEPIECE.convert_tokens_to_ids(["▁the", "▁cat"])
    assert SENTENCEPIECE.decode([the]) == "the"
    assert StopMatcher(["cat "], SENTENCEPIECE).is_done([cat, the])
    assert StopMatcher(["t the"], SENTENCEPIECE).is_done([cat, the])
    assert not StopMatcher(["t the"], SENTENCEPIECE).is_done([cat])


def test_a_character_split_across_byte_tokens_completes_a_stop_on_its_last_byte() -> None:
    """'中' is three byte tokens in the tiny tokenizer, each decoding alone to U+FFFD: the last one
    completes the stop string although its own text holds no '中'."""
    tokens = TINY.encode("a中", add_special_tokens=False)
    assert len(tokens) >= 3 and TINY.decode(tokens[-1:]) == "\ufffd"
    matcher = StopMatcher(["a中"], TINY)
    assert matcher.is_done(tokens)
    assert not matcher.is_done(tokens[:-1])
