"""MCP servers as tool sets: the shipped toy server (tests/tool_use/toy_mcp_server.py, on the
official SDK) started over stdio and over streamable HTTP, its `list_tools` schemas declared as
they are, calls through the official client (valid, invalid against the schema, failed on the
server), servers that cannot start refused by name, and `env_rl env=mcp` on noop with a scripted
model that calls a tool and answers from it: every episode rewarded, trained tokens = sampled."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sys
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from test_openai_agent import Captured, trained_action_tokens

from kitchen.engine.errors import ConfigError, DataError
from kitchen.integrations.tools.mcp import McpServerError, McpServerSettings, McpToolset
from kitchen.testing import run_on_noop

SERVER = Path(__file__).with_name("toy_mcp_server.py")


def mcp_major() -> int:
    try:
        return int(version("mcp").split(".")[0])
    except PackageNotFoundError:
        return 0


# The MCP tools are written on the mcp 2.x client (the test, mcp and hubs extras all install it);
# an environment with an older mcp runs only the refusal test below.
needs_mcp_2 = pytest.mark.skipif(mcp_major() < 2, reason="mcp 2.x is not installed: pip install 'kitchen[mcp]'")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stdio() -> McpServerSettings:
    return McpServerSettings(command=[sys.executable, str(SERVER)])


def http() -> McpServerSettings:
    port = free_port()
    return McpServerSettings(
        command=[sys.executable, str(SERVER), "--http", str(port)], url=f"http://127.0.0.1:{port}/mcp"
    )


@pytest.fixture(params=["stdio", "http"], scope="module")
def toolset(request: pytest.FixtureRequest) -> Iterator[McpToolset]:
    opened = McpToolset.open(stdio() if request.param == "stdio" else http())
    yield opened
    opened.close()


@needs_mcp_2
def test_the_servers_tools_are_declared_with_their_own_schemas(toolset: McpToolset) -> None:
    specs = {tool.spec["function"]["name"]: tool.spec["function"] for tool in toolset.tools}
    assert sorted(specs) == ["add", "broken", "capital"]
    assert specs["add"]["description"] == "Adds two integers exactly."
    assert specs["add"]["parameters"]["required"] == ["a", "b"]
    assert specs["add"]["parameters"]["properties"]["a"]["type"] == "integer"


@needs_mcp_2
def test_calls_go_to_the_server_and_come_back_as_results(toolset: McpToolset) -> None:
    tools = {tool.name: tool for tool in toolset.tools}
    added = asyncio.run(tools["add"].call({"a": 1234, "b": 4321}))
    assert (added.kind, added.text) == ("ok", "5555")
    assert asyncio.run(tools["capital"].call({"island": "Abvenon"})).text == "Eley"
    invalid = asyncio.run(tools["add"].call({"a": "one"}))
    assert invalid.kind == "invalid" and "'one' is not of type 'integer'" in invalid.text and "'b'" in invalid.text
    failed = asyncio.run(tools["broken"].call({}))
    assert failed.kind == "failed" and failed.text.startswith("Error: broken failed")


@needs_mcp_2
def test_a_server_that_cannot_start_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(McpServerError, match="no-such-mcp-server"):
        McpToolset.open(McpServerSettings(command=["no-such-mcp-server"], startup_timeout_s=5))
    with pytest.raises(McpServerError, match="no-such-mcp-server"):
        McpToolset.open(McpServerSettings(command=["no-such-mcp-server"], url="http://127.0.0.1:9/mcp"))
    crashing = tmp_path / "crash.py"
    crashing.write_text("raise SystemExit(3)\n")
    port = free_port()
    with pytest.raises(McpServerError, match="exited with status 3"):
        McpToolset.open(McpServerSettings(command=[sys.executable, str(crashing)], url=f"http://127.0.0.1:{port}/mcp"))
    with pytest.raises(ConfigError, match="a command"):
        McpToolset.open(McpServerSettings())


@pytest.mark.skipif(mcp_major() >= 2, reason="mcp 2.x is installed: the tests above use it")
def test_an_older_mcp_is_refused_with_the_fix() -> None:
    with pytest.raises(McpServerError, match=re.escape("pip install 'mcp>=2.0'")):
        McpToolset.open(stdio())


def scripted_model(prompt: str) -> str:
    """Calls `capital` with the island the question names, then answers with the result."""
    responses = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.S)
    if responses:
        return f"Answer: {responses[-1]}"
    island = re.findall(r"capital of (\w+)\?", prompt)[-1]
    return f'<tool_call>\n{{"name": "capital", "arguments": {{"island": "{island}"}}}}\n</tool_call>'


@needs_mcp_2
def test_env_rl_runs_on_the_servers_tools(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    rows = [{"prompt": "What is the capital of Belyoron?", "answer": "Keltora"},
            {"prompt": "What is the capital of Abvenon?", "answer": "Eley"}]  # fmt: skip
    tasks.write_text("".join(json.dumps(row) + "\n" for row in rows))
    captured = Captured()
    result = run_on_noop(
        "env_rl",
        "env=mcp",
        f"env.server.command={json.dumps([sys.executable, str(SERVER)])}",
        f"env.tasks={tasks}",
        "renderer=qwen3_instruct",
        "rl.num_batches=2",
        "rl.group_size=2",
        "rl.groups_per_batch=2",
        "warm_start.steps=0",
        "sampling.max_tokens=64",
        log_path=tmp_path / "run",
        replies=scripted_model,
        hooks=[captured],
    )
    assert result.column("env/all/reward/total") == [1.0, 1.0]
    assert result.column("env/all/tools/capital/calls") == [0.5, 0.5]  # one call in an episode's two turns
    for step in captured.steps:
        sampled = [
            [token for turn in traj.transitions for token in turn.ac.tokens]
            for group in step["groups"]
            for traj in group.trajectories.trajectories_G
        ]
        assert [trained_action_tokens(d) for d in step["data"]] == sampled


def test_a_bad_task_file_is_refused_by_line(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"prompt": "q", "answer": "a"}\n{"prompt": "q"}\n')
    with pytest.raises(DataError, match=r"tasks\.jsonl line 2"):
        run_on_noop(
            "env_rl",
            "env=mcp",
            f"env.tasks={tasks}",
            "env.server.url=http://127.0.0.1:9/mcp",
            log_path=tmp_path / "run",
        )
