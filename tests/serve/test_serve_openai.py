"""`kitchen serve`'s OpenAI-compatible API, called by the official `openai` client over HTTP on
127.0.0.1 (a real server process on the noop backend; its samples are seeded noise, so the tests
check the protocol, not the words)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import tinker

from tests.serve.server_process import API_KEY, OTHER_KEY, ServerProcess

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluates an expression.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]
QUESTION: list[Any] = [{"role": "user", "content": "What is 482 * 917?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    store = tmp_path_factory.mktemp("serve-openai") / "store"
    process = ServerProcess(store, backend="noop", extra=["--renderer", "qwen3_instruct"]).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0)


def test_models_lists_the_served_models(client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list()] == ["tiny"]


def test_a_completion_has_n_choices_with_the_sampled_tokens_logprobs(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="tiny", messages=QUESTION, n=3, max_tokens=5, logprobs=True, temperature=1.0, seed=7
    )
    assert completion.object == "chat.completion" and [c.index for c in completion.choices] == [0, 1, 2]
    assert completion.usage is not None and completion.usage.completion_tokens <= 15
    for choice in completion.choices:
        assert choice.logprobs is not None and choice.logprobs.content is not None
        assert 1 <= len(choice.logprobs.content) <= 5
        assert all(token.logprob <= 0.0 for token in choice.logprobs.content)
        assert choice.finish_reason in ("stop", "length", "tool_calls")


def test_the_same_seed_draws_the_same_completion(client: openai.OpenAI) -> None:
    def draw(seed: int) -> list[str | None]:
        completion = client.chat.completions.create(model="tiny", messages=QUESTION, n=2, max_tokens=6, seed=seed)
        return [choice.message.content for choice in completion.choices]

    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


def test_tools_are_declared_in_the_prompt(client: openai.OpenAI) -> None:
    plain = client.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=2, seed=1)
    tooled = client.chat.completions.create(
        model="tiny", messages=QUESTION, max_tokens=2, seed=1, tools=TOOLS, tool_choice="auto"
    )
    declined = client.chat.completions.create(
        model="tiny", messages=QUESTION, max_tokens=2, seed=1, tools=TOOLS, tool_choice="none"
    )
    assert plain.usage and tooled.usage and declined.usage
    assert tooled.usage.prompt_tokens > plain.usage.prompt_tokens == declined.usage.prompt_tokens


def test_a_conversation_with_a_tool_round_is_accepted(client: openai.OpenAI) -> None:
    messages: list[Any] = [
        *QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "1"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "441994"},
    ]
    completion = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=3)
    assert len(completion.choices) == 1


def test_stop_strings_cut_the_completion(client: openai.OpenAI) -> None:
    full = client.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=12, seed=5, logprobs=True)
    text = full.choices[0].message.content or ""
    assert len(text) > 2, "the noop sample should have some text to cut"
    stop = text[1:3]
    cut = client.chat.completions.create(
        model="tiny", messages=QUESTION, max_tokens=12, seed=5, stop=[stop], logprobs=True
    )
    assert cut.choices[0].message.content == text[: text.find(stop)]
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].logprobs and full.choices[0].logprobs
    assert len(cut.choices[0].logprobs.content or []) < len(full.choices[0].logprobs.content or [])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"tool_choice": {"type": "function", "function": {"name": "search"}}, "tools": TOOLS},
            "names function 'search', which is not among tools \\(calculator\\)",
        ),
        ({"tool_choice": {"type": "web_search"}, "tools": TOOLS}, "is not supported: use 'auto', 'none', 'required'"),
        ({"model": "gpt-4o"}, "unknown base model 'gpt-4o'"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "unsupported role 'wizard'"),
        ({"top_logprobs": 3, "logprobs": True}, "top_logprobs > 0 is not supported"),
        ({"n": 0}, "n"),
    ],
)
def test_bad_requests_are_answered_400_with_the_reason(
    client: openai.OpenAI, overrides: dict[str, Any], message: str
) -> None:
    request: dict[str, Any] = {"model": "tiny", "messages": QUESTION, "max_tokens": 2, **overrides}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**request)
    # the error's own message: the exception's text quotes the body differently across openai's lines
    body = refused.value.body
    assert isinstance(body, dict) and re.search(message, body["message"]), body


def test_a_key_the_server_does_not_accept_is_401(server: ServerProcess) -> None:
    stranger = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-not-a-kitchen-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.models.list()


def test_a_sampler_checkpoint_is_served_by_its_path_to_its_owner_only(server: ServerProcess) -> None:
    """Weights saved through the Tinker API answer chat requests under their tinker:// path."""
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    try:
        training = service.create_lora_training_client("tiny", rank=4).result()
        path = training.save_weights_for_sampler("chat").result().path
    finally:
        service.close("success").result()
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0)
    completion = client.chat.completions.create(model=path, messages=QUESTION, max_tokens=3, seed=1)
    assert completion.model == path and len(completion.choices) == 1
    stranger = openai.OpenAI(base_url=f"{server.url}/v1", api_key=OTHER_KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError, match="no checkpoint at"):
        stranger.chat.completions.create(model=path, messages=QUESTION, max_tokens=3)
