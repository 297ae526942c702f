"""Tool calls and tool results in RL transcripts and the report, apart from the model's text: a
tool_rl run on noop whose fake model calls the calculator, then answers with its result."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from kitchen.apps.report.build import write_report
from kitchen.testing import run_on_noop


def calculator_user(prompt: str) -> str:
    """The fake model: a calculator call for the question, then the tool's result as the answer."""
    if "<tool_response>" in prompt:
        return prompt.split("<tool_response>\n")[-1].split("\n</tool_response>")[0]
    expression = re.findall(r"What is (.*?)\?", prompt)[-1]
    return f'<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}\n</tool_call>'


def test_transcripts_and_the_report_show_tool_calls_and_results_apart(tmp_path: Path) -> None:
    overrides = ["rl.num_batches=1", "warm_start.steps=0", "rl.groups_per_batch=2", "rl.group_size=2", "eval.every=0"]
    run = run_on_noop(
        "tool_rl", *overrides, "sampling.max_tokens=64", log_path=tmp_path / "run", replies=calculator_user
    )
    assert run.column("env/all/correct") == [1.0] and run.column("env/all/tools/call_valid") == [1.0]
    record = json.loads((run.path / "rollouts" / "step_000000.jsonl").read_text().splitlines()[0])
    first, second = record["turns"]
    expression = re.findall(r"What is (.*?)\?", first["observation"])[-1]
    assert first["tool_calls"] == [{"name": "calculator", "arguments": {"expression": expression}}]
    assert "env_text" not in first and "tool_calls" not in second
    result = str(eval(expression))
    assert second["env_text"].startswith(f"\n<|im_start|>user\n<tool_response>\n{result}\n</tool_response>")

    page = write_report(run.path, tmp_path / "report.html", time.time()).read_text()
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.DOTALL)
    assert match
    data: dict[str, Any] = json.loads(match[1])
    turns = data["browsers"]["transcripts"][0]["groups"][0]["trajectories"][0]["turns"]
    assert turns[0]["tool_calls"] == [{"name": "calculator", "arguments": json.dumps({"expression": expression})}]
    assert turns[1]["env_text"] == second["env_text"] and turns[1]["tool_calls"] == []
