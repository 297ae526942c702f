"""MCP tools in `kitchen serve`'s chat endpoint: a real server process on the noop backend whose
model is scripted (`tests/serve/mcp_script.py`) to call the shipped toy MCP server's tools
(`tests/tool_use/toy_mcp_server.py`, over stdio and over streamable HTTP), called by the official
`openai` client. The server runs the calls, feeds the results back and returns the final reply
with the calls it ran; failures reach the model as text; a server that cannot start stops
`kitchen serve` with exit 2."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.serve.server_process import API_KEY, ROOT, ServerProcess, free_port

TOY = ROOT / "tests" / "tool_use" / "toy_mcp_server.py"
SCRIPT = "noop.replies=tests.serve.mcp_script:reply"
WEATHER: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def mcp_major() -> int:
    try:
        return int(version("mcp").split(".")[0])
    except PackageNotFoundError:
        return 0


pytestmark = pytest.mark.skipif(mcp_major() < 2, reason="mcp 2.x is not installed: pip install 'kitchen[mcp]'")


def serve(tmp: Path, *mcp: str, rounds: int = 3) -> ServerProcess:
    extra = ["--renderer", "qwen3_instruct", "--max-tool-rounds", str(rounds), SCRIPT]
    return ServerProcess(tmp / "store", extra=[*(f"--mcp-server={m}" for m in mcp), *extra]).start()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    server = serve(tmp_path_factory.mktemp("serve-mcp"), f"toy={sys.executable} {TOY}")
    yield openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0)
    server.stop()


def ask(client: openai.OpenAI, question: str, **options: Any) -> Any:
    messages: list[Any] = [{"role": "user", "content": question}]
    return client.chat.completions.create(model="tiny", messages=messages, max_tokens=64, **options)


def ran(choice: Any) -> list[tuple[str, dict[str, Any], str, str]]:
    """The server tool calls of a choice: (name, arguments, server, output)."""
    import json

    calls = (choice.message.model_extra or {}).get("server_tool_calls") or []
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]), c["server"], c["output"]) for c in calls]


def test_the_model_calls_an_mcp_tool_and_answers_from_its_result(client: openai.OpenAI) -> None:
    completion = ask(client, "What is the capital of Belyoron?", n=2)
    for choice in completion.choices:
        assert choice.message.content == "Answer: Keltora"
        assert choice.finish_reason == "stop" and not choice.message.tool_calls
        assert ran(choice) == [("capital", {"island": "Belyoron"}, "toy", "Keltora")]
    plain = ask(client, "What is the capital of Belyoron?", extra_body={"mcp_servers": []})
    assert completion.usage and plain.usage
    assert completion.usage.prompt_tokens > 2 * plain.usage.prompt_tokens  # the second round's prompt counts too


def test_only_the_requested_servers_tools_are_offered(client: openai.OpenAI) -> None:
    declined: list[dict[str, Any]] = [{"extra_body": {"mcp_servers": []}}, {"tools": WEATHER, "tool_choice": "none"}]
    for options in declined:
        completion = ask(client, "What is the capital of Belyoron?", **options)
        assert completion.choices[0].message.content == "I have no tools." and ran(completion.choices[0]) == []
    named = ask(client, "What is the capital of Abvenon?", extra_body={"mcp_servers": ["toy"]})
    assert named.choices[0].message.content == "Answer: Eley"
    with pytest.raises(openai.BadRequestError, match="mcp_servers names 'web': this server runs 'toy'"):
        ask(client, "What is the capital of Abvenon?", extra_body={"mcp_servers": ["web"]})
    clashing = [{**WEATHER[0], "function": {**WEATHER[0]["function"], "name": "add"}}]
    with pytest.raises(openai.BadRequestError, match="tools 'add' are also MCP tools"):
        ask(client, "Add 1 and 2", tools=clashing)


def test_a_failing_call_returns_its_error_to_the_model(client: openai.OpenAI) -> None:
    broken = ask(client, "Use the broken tool.").choices[0]
    output = ran(broken)[0][3]
    assert output.startswith("Error: broken failed") and "Error executing tool broken" in output
    assert broken.message.content == f"Answer: {output}"
    invalid = ask(client, "Add one and 2").choices[0]
    assert ran(invalid)[0][:2] == ("add", {"a": "one", "b": 2})
    assert "invalid arguments for add" in invalid.message.content and "'one' is not of type 'integer'" in (
        invalid.message.content
    )
    assert ask(client, "Add 1234 and 4321").choices[0].message.content == "Answer: 5555"


def test_the_requests_own_tools_go_back_to_the_client(client: openai.OpenAI) -> None:
    completion = ask(client, "The weather and the capital of Abvenon?", tools=WEATHER)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls is not None
    assert [(c.function.name, c.function.arguments) for c in choice.message.tool_calls] == [
        ("get_weather", '{"city": "Abvenon"}')
    ]
    assert ran(choice) == [("capital", {"island": "Abvenon"}, "toy", "Eley")]


def test_tool_rounds_are_bounded(client: openai.OpenAI) -> None:
    choice = ask(client, "Keep calling the capital tool.").choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls
    assert ran(choice) == [("capital", {"island": "Belyoron"}, "toy", "Keltora")] * 3


def test_a_streamable_http_server_is_used_at_its_url(tmp_path: Path) -> None:
    port = free_port()
    toy = subprocess.Popen([sys.executable, str(TOY), "--http", str(port)], stdin=subprocess.DEVNULL)
    try:
        server = serve(tmp_path, f"web=http://127.0.0.1:{port}/mcp")  # serve waits for the MCP server too
        try:
            client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0)
            choice = ask(client, "What is the capital of Abvenon?").choices[0]
            assert choice.message.content == "Answer: Eley" and ran(choice)[0][2:] == ("web", "Eley")
        finally:
            server.stop()
    finally:
        toy.terminate()
        toy.wait(30)


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        (["gone=no-such-mcp-server --flag"], "--mcp-server gone=no-such-mcp-server --flag: MCP server"),
        ([f"a={sys.executable} {TOY}", f"b={sys.executable} {TOY}"], "MCP servers 'a' and 'b' both offer a tool"),
        (["nameless"], "--mcp-server 'nameless': expected NAME=COMMAND or NAME=URL"),
    ],
)
def test_serve_refuses_to_start_without_its_mcp_servers(tmp_path: Path, servers: list[str], message: str) -> None:
    command = [sys.executable, "-m", "kitchen", "serve", "--backend", "noop", "--port", str(free_port())]
    command += ["--store", str(tmp_path / "store"), *(f"--mcp-server={s}" for s in servers)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
