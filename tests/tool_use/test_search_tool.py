"""Search as a tool: the BM25 index over a user corpus (built once, cached by the corpus's hash,
rebuilt when it changes; bad corpora refused by file and line), the `search` tool, the grade, and
the `search_tool` recipe on noop with a scripted model that searches and answers from the result:
every episode is rewarded and the trained tokens are exactly the sampled ones."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from test_openai_agent import Captured, trained_action_tokens

from adapters.common.tokenizer import load_tokenizer
from kitchen.engine.errors import DataError
from kitchen.integrations.tools import SearchIndex, search_tool
from kitchen.testing import run_on_noop
from recipes.envs.search import CORPUS, QUESTIONS, Question, grade, load_questions, terse_search_tool
from recipes.search_tool import RECIPE
from train_core.renderers.messages import Message

DOCS = [
    {"title": "Oxhallow", "text": "Oxhallow grew rich on clocks beside the river Wend."},
    {"title": "Pellingford", "text": "Pellingford is known for its salt market."},
    {"title": "Brindlemoor", "text": "Brindlemoor grew rich on wool."},
]


def write(path: Path, rows: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_the_index_finds_the_document_that_shares_the_query_words(tmp_path: Path) -> None:
    index = SearchIndex.open(write(tmp_path / "docs.jsonl", DOCS))
    assert [d.title for d in index.search("which town had a salt market", 1)] == ["Pellingford"]
    assert index.search("clocks", 3)[0].title == "Oxhallow"
    assert index.search("zebra", 3) == []  # no shared word, no hit


def test_the_index_is_built_once_and_rebuilt_when_the_corpus_changes(tmp_path: Path) -> None:
    corpus = write(tmp_path / "docs.jsonl", DOCS)
    first = SearchIndex.open(corpus)
    assert first.folder.parent == tmp_path / ".docs.jsonl.bm25s"
    stamp = (first.folder / "params.index.json").stat().st_mtime_ns
    again = SearchIndex.open(corpus)
    assert again.folder == first.folder and (again.folder / "params.index.json").stat().st_mtime_ns == stamp
    write(corpus, [*DOCS, {"title": "Calder Vey", "text": "Calder Vey trades in amber."}])
    changed = SearchIndex.open(corpus, tmp_path / "elsewhere")
    assert changed.folder.parent == tmp_path / "elsewhere" and changed.folder.name != first.folder.name
    assert changed.search("amber", 1)[0].title == "Calder Vey"


@pytest.mark.parametrize(
    ("line", "message"),
    [("not json", "line 2: not JSON"), (json.dumps({"title": "x"}), "line 2: a corpus record"),
     (json.dumps(DOCS[0]), "line 2: title 'Oxhallow' appears twice")],
)  # fmt: skip
def test_a_bad_corpus_is_refused_by_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(json.dumps(DOCS[0]) + "\n" + line + "\n")
    with pytest.raises(DataError, match=message):
        SearchIndex.open(corpus)


def test_the_search_tool_answers_with_titles_and_texts(tmp_path: Path) -> None:
    tool = search_tool(SearchIndex.open(write(tmp_path / "docs.jsonl", DOCS)), top_k=2)
    assert tool.spec["function"]["parameters"]["required"] == ["query"]
    result = asyncio.run(tool.call({"query": "wool"}))
    assert result.kind == "ok" and result.text.startswith("Brindlemoor\nBrindlemoor grew rich on wool.")
    assert asyncio.run(tool.call({"q": "wool"})).kind == "invalid"


def test_the_grade_reads_the_answer_after_its_marker() -> None:
    grader = grade(Question("What is the capital of Ib?", "Lorsen", "Ib"), format_coef=0.1)
    searched = [Message(role="user", content="q"), Message(role="tool", content="Ib", name="search")]
    assert grader([*searched, Message(role="assistant", content="Answer: the lorsen.")])[0] == 1.0
    assert grader([*searched, Message(role="assistant", content="Answer: Keltora")])[0] == 0.0
    reward, parts = grader([Message(role="assistant", content="Lorsen")])
    assert reward == pytest.approx(-0.1) and parts == {
        "search/correct": 0.0,
        "search/format": 0.0,
        "search/searched": 0.0,
    }


def test_every_shipped_question_is_answered_by_its_document() -> None:
    index = SearchIndex.open(CORPUS)
    questions = load_questions(QUESTIONS)
    assert len(questions) == 2 * len(index.documents) == 120
    for q in questions:
        document = index.document(q.title)
        assert document is not None and f" is {q.answer}." in document.text
        assert q.answer not in q.question.split('"')[1]
        assert [d.title for d in index.search(q.title, 2)] == [q.title]  # the subject finds its document only


def test_every_shipped_name_and_answer_is_one_tiny_token_where_it_stands() -> None:
    """What the tiny model copies is one token in each place: the quoted name in the question and
    the query, the title heading the result, the answer after a space in the result and the reply."""
    tokenizer = load_tokenizer("tiny")

    def pieces(text: str) -> list[str]:
        return [tokenizer.decode([t]) for t in tokenizer.encode(text, add_special_tokens=False)]

    for q in load_questions(QUESTIONS):
        document = SearchIndex.open(CORPUS).document(q.title)
        assert document is not None
        assert q.title in pieces(q.question) and q.title in pieces(json.dumps({"query": q.title}))
        assert q.title in pieces(f"{document.title}\n{document.text}")
        assert f" {q.answer}" in pieces(document.text) and f" {q.answer}" in pieces(f"Answer: {q.answer}")


def test_the_recipe_declares_search_without_descriptions(tmp_path: Path) -> None:
    """The tiny model's prompt is mostly the tool declaration: the recipe's declares one `query`
    string and nothing else, and it still searches."""
    tool = terse_search_tool(SearchIndex.open(CORPUS, str(tmp_path)), 1)
    assert tool.spec["function"] == {
        "name": "search",
        "parameters": {
            "additionalProperties": False,
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
            "type": "object",
        },
    }
    assert asyncio.run(tool.call({"query": "ner"})).text.startswith("ner\nner is an island.")
    assert asyncio.run(tool.call({"q": "ner"})).error


def test_answering_without_searching_fails() -> None:
    """The facts are drawn at random: the best answer from memory (the commonest training answer
    to each kind of question) is right for few held-out questions; only the search answers them."""
    questions = load_questions(QUESTIONS)
    held_out, train = questions[:24], questions[24:]
    right = 0
    for q in held_out:
        kind = q.question.split('"')[0]
        answers = [t.answer for t in train if t.question.startswith(kind)]
        right += Counter(answers).most_common(1)[0][0] == q.answer
    assert right / len(held_out) <= 0.2


def scripted_model(prompt: str) -> str:
    """search(the island the question names), then the fact after the question's key word."""
    responses = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.S)
    question = prompt.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
    island = re.findall(r'"(\w+)"\?', question)[0]
    if not responses:
        return f'<tool_call>\n{{"name": "search", "arguments": {{"query": "{island}"}}}}\n</tool_call>'
    key = "capital" if "capital" in question else "export"
    return "Answer: " + re.findall(key + r" is (\w+)", responses[-1])[0]


def test_the_search_tool_recipe_trains_on_exactly_what_it_sampled(tmp_path: Path) -> None:
    captured = Captured()
    short = ["rl.num_batches=2", "rl.group_size=2", "rl.groups_per_batch=2", "eval.every=0", "warm_start.steps=0"]
    result = run_on_noop(RECIPE, *short, log_path=tmp_path / "run", replies=scripted_model, hooks=[captured])
    assert result.column("env/all/reward/total") == [1.0, 1.0]
    assert result.column("env/all/search/searched") == [1.0, 1.0]
    episodes = 0
    for step in captured.steps:
        sampled = [
            [token for turn in traj.transitions for token in turn.ac.tokens]
            for group in step["groups"]
            for traj in group.trajectories.trajectories_G
        ]
        assert all(len(traj.transitions) == 2 for g in step["groups"] for traj in g.trajectories.trajectories_G)
        assert [trained_action_tokens(d) for d in step["data"]] == sampled  # one datum per episode
        episodes += len(sampled)
    assert episodes == 8
