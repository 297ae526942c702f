"""Tools from typed functions, and the tool-use env's loop on the tiny tokenizer with scripted
replies (the model's side is the only thing scripted: rendering, parsing and tool runs are real)."""

from __future__ import annotations

import asyncio
import json

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from adapters.common.tiny import TINY_DIR
from kitchen.integrations.tools import Tool, Toolbox, ToolUseEnv, tool
from kitchen.integrations.tools.env import PARSE_ERROR_MESSAGE
from train_core.renderers import Message, RendererError, get_renderer


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(TINY_DIR)


def add(a: int, b: int = 0) -> int:
    """Adds two integers.

    The second defaults to zero.

    Args:
        a: the first addend
        b (int): the second addend,
            which may be negative

    Returns:
        the sum
    """
    return a + b


def test_the_schema_comes_from_the_signature_and_docstring() -> None:
    assert Tool.from_function(add).spec == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Adds two integers.",
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "a": {"type": "integer", "description": "the first addend"},
                    "b": {"type": "integer", "default": 0, "description": "the second addend, which may be negative"},
                },
                "required": ["a"],
            },
        },
    }


def test_a_parameter_without_annotation_is_refused_by_name() -> None:
    def f(x):
        return x

    with pytest.raises(TypeError, match="parameter 'x' needs a type annotation"):
        Tool.from_function(f)


def test_sync_and_async_tools_answer_as_text() -> None:
    @tool(name="lookup")
    async def find(key: str) -> dict[str, str]:
        """Looks a key up."""
        return {"key": key, "value": key.upper()}

    assert find.name == "lookup"
    assert asyncio.run(find.call({"key": "ab"})).text == json.dumps({"key": "ab", "value": "AB"})
    result = asyncio.run(tool(add).call({"a": 2, "b": 3}))
    assert (result.text, result.error) == ("5", False)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"b": 1}, "Error: invalid arguments for add: a: Field required"),
        ({"a": "x"}, "Error: invalid arguments for add: a: Input should be a valid integer"),
        ({"a": 1, "c": 2}, "Error: invalid arguments for add: c: Extra inputs are not permitted"),
    ],
)
def test_invalid_arguments_are_an_error_result(arguments: dict[str, object], expected: str) -> None:
    result = asyncio.run(tool(add).call(arguments))
    assert result.error and result.text.startswith(expected)


def test_a_raising_tool_and_a_slow_tool_become_error_results() -> None:
    @tool
    def divide(a: int, b: int) -> float:
        """Divides."""
        return a / b

    @tool(timeout_s=0.01)
    async def wait(seconds: float) -> str:
        """Waits."""
        await asyncio.sleep(seconds)
        return "done"

    assert (
        asyncio.run(divide.call({"a": 1, "b": 0})).text == "Error: divide failed: ZeroDivisionError: division by zero"
    )
    assert asyncio.run(wait.call({"seconds": 5})).text == "Error: wait timed out after 0.01 s"


def test_the_toolbox_caps_calls_running_at_once() -> None:
    running, peak = 0, 0

    @tool
    async def probe(n: int) -> int:
        """Counts how many calls overlap."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        running -= 1
        return n

    async def main(limit: int) -> None:
        box = Toolbox([probe], max_concurrent_calls=limit)
        await asyncio.gather(*(box.call({"name": "probe", "arguments": {"n": i}}) for i in range(5)))

    asyncio.run(main(2))
    assert peak == 2
    peak = 0
    asyncio.run(main(5))
    assert peak == 5


def _final_answer_is_7(messages: list[Message]) -> float:
    return float(messages[-1]["role"] == "assistant" and messages[-1]["content"] == "7")


def _env(tokenizer: PreTrainedTokenizerBase, max_turns: int = 4) -> ToolUseEnv:
    renderer = get_renderer("qwen3_instruct", tokenizer)
    question = [Message(role="user", content="What is 3 + 4?")]
    return ToolUseEnv(renderer, Toolbox([tool(add)]), question, _final_answer_is_7, max_turns=max_turns)


def _reply(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return list(tokenizer.encode(text + "<|im_end|>", add_special_tokens=False))


CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n</tool_call>'


def test_the_loop_runs_a_call_then_grades_the_answer(tokenizer: PreTrainedTokenizerBase) -> None:
    env = _env(tokenizer)

    async def episode() -> None:
        ob, _ = await env.initial_observation()
        assert '"name": "add"' in tokenizer.decode(ob.to_ints())  # declared in the system prompt
        first = await env.step(_reply(tokenizer, CALL))
        assert not first.episode_done and first.reward == 0.0
        assert first.metrics["tools/call_valid"] == 1.0 and first.metrics["tools/add/calls"] == 1.0
        shown = str(tokenizer.decode(first.next_observation.to_ints()))
        assert shown.endswith("<tool_response>\n7\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
        # the next observation extends the last one and its action: the episode is one datum
        assert first.next_observation.to_ints()[: ob.length] == ob.to_ints()
        second = await env.step(_reply(tokenizer, "7"))
        assert second.episode_done and second.reward == 1.0 and "tools/call_valid" not in second.metrics

    asyncio.run(episode())
    assert env.messages[-3]["tool_calls"] == [{"name": "add", "arguments": {"a": 3, "b": 4}}]


def test_a_malformed_call_is_answered_with_an_error_and_counted(tokenizer: PreTrainedTokenizerBase) -> None:
    env = _env(tokenizer, max_turns=2)

    async def episode() -> None:
        await env.initial_observation()
        bad = await env.step(_reply(tokenizer, CALL.replace("}}", "}")))
        assert not bad.episode_done and not bad.parse_ok
        assert bad.metrics["tools/parse_errors"] == 1.0 and bad.metrics["tools/call_valid"] == 0.0
        assert str(tokenizer.decode(bad.next_observation.to_ints())).endswith(
            PARSE_ERROR_MESSAGE + "<|im_end|>\n<|im_start|>assistant\n"
        )
        last = await env.step(_reply(tokenizer, CALL))  # the turn limit: graded as it stands
        assert last.episode_done and last.reward == 0.0 and last.metrics["tools/out_of_turns"] == 1.0

    asyncio.run(episode())


def test_an_unknown_tool_is_an_error_result_the_model_sees(tokenizer: PreTrainedTokenizerBase) -> None:
    env = _env(tokenizer)

    async def episode() -> None:
        await env.initial_observation()
        result = await env.step(_reply(tokenizer, CALL.replace('"add"', '"mul"')))
        assert result.metrics["tools/unknown_calls"] == 1.0 and result.metrics["tools/call_valid"] == 0.0
        assert env.messages[-1]["content"] == "Error: unknown tool 'mul'; tools: add"

    asyncio.run(episode())


def test_a_renderer_without_a_tool_format_is_refused(tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(RendererError, match="RoleColonRenderer has no native tool format"):
        ToolUseEnv(get_renderer("role_colon", tokenizer), Toolbox([tool(add)]), [], _final_answer_is_7)
