"""Properties every renderer keeps, on random conversations it can express (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from renderer_cases import (
    CAPABILITIES,
    GPT_OSS_DATE,
    Conversation,
    by_tier,
    conversations,
    decode_text,
    expected_parse,
    expected_preamble,
)
from transformers import PreTrainedTokenizerBase

from train_core.renderers import Message, Renderer, TrainOnWhat, get_renderer
from train_core.renderers.gpt_oss import GptOssRenderer

NAMES = sorted(CAPABILITIES)
EXTENSION_NAMES = [n for n in NAMES if CAPABILITIES[n].has_extension_property]
PROPERTY_SETTINGS = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def make_renderer(name: str, tokenizer: PreTrainedTokenizerBase) -> Renderer:
    renderer = get_renderer(name, tokenizer)
    if isinstance(renderer, GptOssRenderer):
        renderer.current_date = GPT_OSS_DATE
    return renderer


def weights_of(renderer: Renderer, messages: list[Message], train_on_what: TrainOnWhat) -> list[float]:
    return renderer.build_supervised_example(messages, train_on_what)[1]


def only(messages: list[Message], chosen: set[int]) -> list[Message]:
    return [Message(**m, trainable=i in chosen) for i, m in enumerate(messages)]


def union(runs: list[list[float]], length: int) -> list[float]:
    return [float(any(run[t] for run in runs)) for t in range(length)]


@pytest.mark.parametrize("name", by_tier(NAMES))
@PROPERTY_SETTINGS
@given(data=st.data())
def test_weights_are_one_exactly_on_the_selected_messages(
    name: str, data: st.DataObject, tokenizer: PreTrainedTokenizerBase
) -> None:
    renderer = make_renderer(name, tokenizer)
    messages = data.draw(conversations(name)).messages
    model_input, all_tokens_weights = renderer.build_supervised_example(messages, TrainOnWhat.ALL_TOKENS)
    tokens = model_input.to_ints()
    untrained = [t for t, w in zip(tokens, all_tokens_weights, strict=True) if not w]
    assert tokenizer.decode(untrained) == expected_preamble(name, messages)

    per_message: list[list[float]] = []
    for k, message in enumerate(messages):
        weights = weights_of(renderer, only(messages, {k}), TrainOnWhat.CUSTOMIZED)
        assert set(weights) <= {0.0, 1.0} and len(weights) == len(tokens)
        trained_at = [t for t, w in enumerate(weights) if w]
        assert trained_at and trained_at == list(range(trained_at[0], trained_at[-1] + 1)), k
        text = tokenizer.decode([tokens[t] for t in trained_at])
        assert message["content"] in text
        assert [f"[{j}]" in text for j in range(len(messages))] == [
            f"[{j}]" in message["content"] for j in range(len(messages))
        ]
        per_message.append(weights)

    def selected(predicate: list[bool]) -> list[float]:
        return union([w for w, chosen in zip(per_message, predicate, strict=True) if chosen], len(tokens))

    roles = [m["role"] for m in messages]
    last_user = max(i for i, r in enumerate(roles) if r == "user")
    assert weights_of(renderer, messages, TrainOnWhat.ALL_MESSAGES) == selected([True] * len(messages))
    assert weights_of(renderer, messages, TrainOnWhat.ALL_ASSISTANT_MESSAGES) == selected(
        [r == "assistant" for r in roles]
    )
    assert weights_of(renderer, messages, TrainOnWhat.ALL_USER_AND_SYSTEM_MESSAGES) == selected(
        [r in ("user", "system") for r in roles]
    )
    assert weights_of(renderer, messages, TrainOnWhat.LAST_ASSISTANT_TURN) == selected(
        [r == "assistant" and i > last_user for i, r in enumerate(roles)]
    )
    assert weights_of(renderer, messages, TrainOnWhat.LAST_ASSISTANT_MESSAGE) == per_message[-1]


@pytest.mark.parametrize("name", by_tier(EXTENSION_NAMES))
@PROPERTY_SETTINGS
@given(data=st.data())
def test_generation_prompt_is_a_prefix_of_the_supervised_example(
    name: str, data: st.DataObject, tokenizer: PreTrainedTokenizerBase
) -> None:
    """The prompt is untrained, its last header stays untrained unless ALL_TOKENS, and the rest
    of the example is exactly the trained reply."""
    renderer = make_renderer(name, tokenizer)
    conversation: Conversation = data.draw(conversations(name))
    prompt = renderer.build_generation_prompt(conversation.history).to_ints()
    history = renderer.build_supervised_example(conversation.history)[0].to_ints()
    model_input, weights = renderer.build_supervised_example(conversation.messages)
    tokens = model_input.to_ints()
    assert tokens[: len(prompt)] == prompt and prompt[: len(history)] == history
    assert weights == [0.0] * len(prompt) + [1.0] * (len(tokens) - len(prompt))
    header = range(len(history), len(prompt))
    all_messages = weights_of(renderer, conversation.messages, TrainOnWhat.ALL_MESSAGES)
    all_tokens = weights_of(renderer, conversation.messages, TrainOnWhat.ALL_TOKENS)
    assert [all_messages[t] for t in header] == [0.0] * len(header)
    assert [all_tokens[t] for t in header] == [1.0] * len(header)


@pytest.mark.parametrize("name", by_tier(NAMES))
@PROPERTY_SETTINGS
@given(data=st.data())
def test_parse_response_returns_the_rendered_reply(
    name: str, data: st.DataObject, tokenizer: PreTrainedTokenizerBase
) -> None:
    renderer = make_renderer(name, tokenizer)
    conversation: Conversation = data.draw(conversations(name))
    model_input, weights = renderer.build_supervised_example(conversation.messages)
    reply_tokens = [t for t, w in zip(model_input.to_ints(), weights, strict=True) if w]
    expected = expected_parse(name, conversation.reply, conversation.reply_follows_tool)
    assert renderer.parse_response(reply_tokens) == (expected, True)
    cut_off, ok = renderer.parse_response(reply_tokens[: len(reply_tokens) // 2])
    assert not ok and cut_off["role"] == "assistant"


@pytest.mark.parametrize("name", by_tier([n for n in NAMES if n != "hf_chat_template"]))
@PROPERTY_SETTINGS
@given(data=st.data())
def test_stop_sequences_end_every_rendered_assistant_turn(
    name: str, data: st.DataObject, tokenizer: PreTrainedTokenizerBase
) -> None:
    renderer = make_renderer(name, tokenizer)
    stops = renderer.get_stop_sequences()
    messages = data.draw(conversations(name)).messages
    model_input, _ = renderer.build_supervised_example(messages)
    tokens = model_input.to_ints()
    checked = [
        k
        for k, m in enumerate(messages)
        if m["role"] == "assistant" and (k == len(messages) - 1 or CAPABILITIES[name].history_ends_with_stop)
    ]
    for k in checked:
        weights = weights_of(renderer, only(messages, {k}), TrainOnWhat.CUSTOMIZED)
        turn = [t for t, w in zip(tokens, weights, strict=True) if w]
        if all(isinstance(s, str) for s in stops):
            text = decode_text(tokenizer, turn)
            assert any(text.endswith(str(s)) for s in stops) and not any(str(s) in text[:-1] for s in stops)
        else:
            assert turn[-1] in stops and not set(turn[:-1]) & set(stops)


class _WithBos:
    """The tiny tokenizer as a base-model tokenizer that defines a BOS token (as Llama 3's does)."""

    bos_token = "<|begin_of_text|>"

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self._tokenizer = tokenizer

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, token_ids: list[int]) -> str:
        return decode_text(self._tokenizer, token_ids)


def test_role_colon_opens_with_the_tokenizers_bos_untrained(tokenizer: PreTrainedTokenizerBase) -> None:
    renderer = get_renderer("role_colon", _WithBos(tokenizer))
    messages = [Message(role="user", content="Hi"), Message(role="assistant", content="Hello")]
    model_input, weights = renderer.build_supervised_example(messages, TrainOnWhat.ALL_TOKENS)
    (bos,) = tokenizer.encode("<|begin_of_text|>", add_special_tokens=False)
    assert model_input.to_ints()[0] == bos and weights[0] == 0.0
    assert renderer.build_generation_prompt(messages[:1]).to_ints()[0] == bos
    assert get_renderer("role_colon", tokenizer).build_generation_prompt(messages[:1]).to_ints()[0] != bos


_spaced_text = st.text(alphabet="ab .\n\t", max_size=12).filter(lambda s: "\n\nUser:" not in s)


@PROPERTY_SETTINGS
@given(content=_spaced_text)
def test_role_colon_parse_gives_back_the_rendered_content_exactly(
    content: str, tokenizer: PreTrainedTokenizerBase
) -> None:
    """The model's own leading and trailing whitespace survives rendering then parsing."""
    renderer = get_renderer("role_colon", tokenizer)
    messages = [Message(role="user", content="Hi"), Message(role="assistant", content=content)]
    model_input, weights = renderer.build_supervised_example(messages)
    reply = [t for t, w in zip(model_input.to_ints(), weights, strict=True) if w]
    assert renderer.parse_response(reply) == (Message(role="assistant", content=content), True)
