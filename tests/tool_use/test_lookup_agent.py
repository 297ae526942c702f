"""The shipped `lookup_agent` recipe: an agent written against the official `openai` client
(recipes/agents/lookup.py), trained by RL. On noop the fake model's replies are scripted to
search, read and answer, so every episode is rewarded; the trained tokens are the sampled ones,
call by call. On local (slow) the tiny model's own samples run two short steps."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from test_openai_agent import Captured, check_trained_equals_sampled
from transformers import AutoTokenizer

from adapters.common.tiny import TINY_DIR
from kitchen.engine.config.loading import load_config
from kitchen.engine.launch import run_recipe
from kitchen.engine.runs.metrics import read_metrics
from kitchen.testing import run_on_noop
from recipes.agents.lookup import Corpus
from recipes.envs.lookup import Teacher, load_questions
from recipes.lookup_agent import RECIPE, Config
from train_core.renderers import get_renderer

CORPUS = Corpus.load()
SHORT = ["rl.num_batches=2", "rl.group_size=2", "rl.groups_per_batch=2", "eval.every=0", "checkpoint.save_every=0"]


def scripted_model(prompt: str) -> str:
    """search(the town the question names), then read(the first hit), then the document's sentence
    that answers the question."""
    responses = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.S)
    if not responses:
        town = next(title for title in CORPUS.documents if title in prompt)
        return f'<tool_call>\n{{"name": "search", "arguments": {{"query": "{town}"}}}}\n</tool_call>'
    if len(responses) == 1:
        title = responses[0].splitlines()[0]
        return f'<tool_call>\n{{"name": "read", "arguments": {{"title": "{title}"}}}}\n</tool_call>'
    question = prompt.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
    key = next(k for k in ("founded", "river", "rich") if k in question)
    return next(sentence for sentence in responses[-1].split(". ") if key in sentence)


def test_the_lookup_agent_searches_reads_and_is_trained_on_what_it_sampled(tmp_path: Path) -> None:
    captured = Captured()
    result = run_on_noop(
        RECIPE, *SHORT, "warm_start.steps=0", log_path=tmp_path / "run", replies=scripted_model, hooks=[captured]
    )
    assert result.column("env/all/reward/total") == [1.0, 1.0]
    assert result.column("env/all/agent/calls") == [3.0, 3.0]
    assert check_trained_equals_sampled(captured, datums_per_episode=1) == 8


def test_the_teacher_answers_from_the_document_it_read() -> None:
    questions = load_questions()
    assert len(questions) == 3 * len(CORPUS.documents)
    assert all(q.answer in CORPUS.documents[q.title] for q in questions)
    renderer = get_renderer("qwen3_instruct", AutoTokenizer.from_pretrained(TINY_DIR))
    teacher = Teacher(renderer, questions, CORPUS, error_rate=0.0)
    episode = teacher(random.Random(0), 1)[0]
    tool_results = [m["content"] for m in episode if m["role"] == "tool"]
    assert episode[-1]["content"] in tool_results[-1]


@pytest.mark.slow
def test_on_the_local_backend_the_tiny_model_trains_the_lookup_agent(tmp_path: Path) -> None:
    captured = Captured()
    args = [
        "backend=local",
        "model_name=tiny",
        "sampling.max_tokens=16",
        "warm_start.steps=2",
        *SHORT,
        f"log_path={tmp_path}",
    ]
    run_dir = run_recipe(RECIPE, load_config(Config, None, args), hooks=[captured], progress=False)
    metrics = read_metrics(run_dir.metrics)
    assert [row["step"] for row in metrics if "env/all/reward/total" in row] == [0, 1]
    assert check_trained_equals_sampled(captured, datums_per_episode=None) == 8
