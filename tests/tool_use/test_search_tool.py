"""Search as a tool: the BM25 index over a user corpus (built once, cached by the corpus's hash,
rebuilt when it changes; bad corpora refused by file and line), the `search` tool, the grade, and
the `search_tool` recipe on noop with a scripted model that searches and answers from the result:
every episode is rewarded and the trained tokens are exactly the sampled ones."""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest
from test_openai_agent import Captured, trained_action_tokens

from adapters.common.tokenizer import load_tokenizer
from kitchen.engine.errors import DataError
from kitchen.integrations.tools import SearchIndex, Toolbox, search_tool
from kitchen.testing import run_on_noop
from recipes.envs.search import (
    CORPUS,
    HELD_OUT,
    QUESTIONS,
    Question,
    SearchSettings,
    Teacher,
    check_questions,
    grade,
    load_questions,
    search_task,
    terse_search_tool,
)
from recipes.search_tool import RECIPE, Config
from tests.helpers import run_cli
from train_core.renderers.messages import Message
from train_core.renderers.registry import get_renderer

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


def test_every_shipped_question_is_answered_by_its_document_alone() -> None:
    index = SearchIndex.open(CORPUS)
    questions = load_questions(QUESTIONS) + load_questions(HELD_OUT)
    assert len(questions) == len(index.documents) == 120
    for q in questions:
        document = index.document(q.title)
        assert document is not None and document.text == f"{q.title} {q.answer}" and q.question == f"{q.title}?"
        assert index.search(q.title, 1)[0].title == q.title  # the query (the title) finds its document


def test_every_held_out_token_to_write_is_written_in_training() -> None:
    """Each held-out question's island has its other question in training, and its answer is a
    training answer: a held-out reply writes only tokens that training replies write."""
    train, held_out = load_questions(QUESTIONS), load_questions(HELD_OUT)
    islands = Counter(q.title.split("-")[1] for q in train)
    assert len(held_out) == 24 and len({q.title.split("-")[1] for q in held_out}) == 24
    assert all(islands[q.title.split("-")[1]] == 1 for q in held_out)
    assert {q.answer for q in held_out} <= {q.answer for q in train}
    assert not {q.title for q in held_out} & {q.title for q in train}


def test_every_copy_is_one_tiny_token_at_a_fixed_offset(tmp_path: Path) -> None:
    """In the teacher's episodes every token the model copies is one tiny token, and it stands a
    fixed number of tokens before the place it is copied to: the question's kind word and name
    before the query's, the result's last token (the answer) before the reply's."""
    tokenizer = load_tokenizer("tiny")
    renderer = get_renderer("qwen3_instruct", tokenizer)
    toolbox = Toolbox([terse_search_tool(SearchIndex.open(CORPUS, str(tmp_path)), 1)])
    questions = load_questions(QUESTIONS) + load_questions(HELD_OUT)
    teacher = Teacher(renderer, toolbox, questions, error_rate=0.0)

    def find(part: list[str], pieces: list[str], start: int) -> list[int]:
        return [i for i in range(start, len(pieces)) if pieces[i : i + len(part)] == part]

    offsets = set()
    for seed in range(40):
        episode = teacher(random.Random(seed), 1)[0]
        example, _ = renderer.build_supervised_example(episode)
        pieces = [tokenizer.decode([t]) for t in example.to_ints()]
        user = find(["<|im_start|>", "user", "\n"], pieces, 0)[0] + 3
        title = pieces[user : user + 3]  # kind, "-", name: one token each
        question = next(m["content"] for m in episode if m["role"] == "user")
        assert "".join(title) + "?" == question and pieces[user + 3 : user + 5] == ["?", "<|im_end|>"]
        query, *_, text = find(title, pieces, user + 1)  # the query; the result's text, "title answer"
        answer = pieces[text + 3]
        assert answer.startswith(" ") and pieces[text + 4] == "\n" and pieces[-2:] == [answer, "<|im_end|>"]
        offsets.add((query - user, len(pieces) - 2 - (text + 3)))
    assert len(offsets) == 1  # the same distances in every episode


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
    assert asyncio.run(tool.call({"query": "land-aby"})).text == "land-aby\nland-aby road"
    assert asyncio.run(tool.call({"q": "ner"})).error


def test_answering_without_searching_fails() -> None:
    """The facts are drawn at random: the best answer from memory (the commonest training answer
    to each kind of question) is right for few held-out questions; only the search answers them."""
    train, held_out = load_questions(QUESTIONS), load_questions(HELD_OUT)
    right = 0
    for q in held_out:
        kind = q.title.split("-")[0]
        answers = [t.answer for t in train if t.title.startswith(f"{kind}-")]
        right += Counter(answers).most_common(1)[0][0] == q.answer
    assert right / len(held_out) <= 0.2


def scripted_model(prompt: str) -> str:
    """search(the question's words), then the last word of the result."""
    responses = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.S)
    question = prompt.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
    if not responses:
        return f'<tool_call>\n{{"name": "search", "arguments": {{"query": "{question.rstrip("?")}"}}}}\n</tool_call>'
    return "Answer: " + responses[-1].split()[-1]


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


@pytest.mark.parametrize("held_out", [HELD_OUT, None])
def test_the_held_out_questions_come_from_their_file_or_at_random(tmp_path: Path, held_out: str | None) -> None:
    config = Config()
    settings = config.env.model_copy(update={"held_out": held_out, "index_dir": str(tmp_path)})
    task = search_task(settings, config, get_renderer("qwen3_instruct", load_tokenizer("tiny")))
    evaluated = [builder.question for builder in task.eval_builders]  # type: ignore[attr-defined]
    trained = task.train.questions  # type: ignore[attr-defined]
    assert len(evaluated) == settings.num_eval_questions == 24 and not set(evaluated) & set(trained)
    if held_out is None:  # a seeded sample of the questions, the rest trained
        assert sorted(evaluated + trained, key=str) == sorted(load_questions(QUESTIONS), key=str)
    else:
        assert sorted(evaluated, key=str) == sorted(load_questions(HELD_OUT), key=str)
        assert trained == load_questions(QUESTIONS)


def test_a_user_corpus_with_the_shipped_held_out_file_is_refused_before_work(tmp_path: Path) -> None:
    corpus, questions = tmp_path / "docs.jsonl", tmp_path / "questions.jsonl"
    write(corpus, DOCS)
    write(questions, [{"question": f"Who is {d['title']}?", "answer": "x", "title": d["title"]} for d in DOCS])
    mine = (f"env.corpus={corpus}", f"env.questions={questions}", "backend=noop", f"log_path={tmp_path / 'run'}")
    refused = run_cli("run", "search_tool", *mine)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "env.held_out" in refused.stderr and "env.held_out=null" in refused.stderr
    settings = SearchSettings(corpus=str(corpus), questions=str(questions), held_out=None)
    check_questions(settings)  # a random sample of the user's questions is held out instead
    trained_again = [{"question": "Who is Oxhallow?", "answer": "x", "title": "Oxhallow"}]
    held_out = write(tmp_path / "held_out.jsonl", trained_again)
    with pytest.raises(DataError, match=r"env.held_out .*question 1: 'Who is Oxhallow\?' is also a training question"):
        check_questions(settings.model_copy(update={"held_out": str(held_out)}))
    write(questions, [{"question": "Who?", "answer": "x", "title": "Nowhere"}])
    with pytest.raises(DataError, match=r"env.questions .*question 1: its title 'Nowhere' is no document"):
        check_questions(settings)
