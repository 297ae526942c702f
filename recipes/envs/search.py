"""The search environment: questions about a corpus answered with a `search` tool over its BM25
index (`kitchen.integrations.tools.search`), in the renderer's native tool format. The shipped
corpus invents 60 islands, one document per fact, with its held-out questions in a file of their
own (recipes/data/search), so only the tool can answer; any user corpus of `{"title", "text"}`
records with `{"question", "answer", "title"}` questions works the same way (with no held-out
file, `env.num_eval_questions` of the questions are held out at random).

Graded as Search-R1 and tinker-cookbook's search_tool grade: the final reply's text after
`Answer:` must equal the gold answer (lower-cased, punctuation and articles dropped), and a reply
without `Answer:` costs `format_coef`: reward = format_coef * (format - 1) + correct. The warm
start imitates a teacher who searches the question's document title and answers from the result, except
that `teacher_error_rate` of the time it answers without searching (another question's answer).
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from kitchen import DataError, Section
from kitchen.families.rl import RLSettings
from kitchen.integrations.tools import SearchIndex, Tool, Toolbox, ToolUseEnv, search_tool
from recipes.data import shipped_data
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message, ToolCall
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder, Metrics, RLDataset

CORPUS = shipped_data("search/corpus.jsonl")
QUESTIONS = shipped_data("search/questions.jsonl")
HELD_OUT = shipped_data("search/held_out.jsonl")


class SearchSettings(Section):
    """Config section `env` of search_tool: the corpus, its questions, the tool and the grade."""

    corpus: str = Field(CORPUS, description='JSONL of {"title", "text"} documents to search')
    questions: str = Field(QUESTIONS, description='JSONL of {"question", "answer", "title"} about the corpus')
    held_out: str | None = Field(
        HELD_OUT, description="JSONL of held-out questions; none: a seeded random sample of `questions` is held out"
    )
    index_dir: str | None = Field(None, description="where the BM25 index is cached; default: beside the corpus")
    top_k: int = Field(1, ge=1, description="documents one search returns")
    max_turns: int = Field(2, ge=1, description="model turns per episode (searches plus the answer)")
    num_eval_questions: int = Field(24, ge=1, description="held-out questions scored every eval.every steps")
    format_coef: float = Field(0.1, ge=0, description="what a final reply without 'Answer:' costs")
    teacher_error_rate: float = Field(
        0.0, ge=0, le=1, description="share of warm-start episodes in which the teacher answers without searching"
    )


class Query(BaseModel):  # no docstring: pydantic would declare it as the schema's description
    model_config = ConfigDict(extra="forbid")
    query: str


def terse_search_tool(index: SearchIndex, top_k: int) -> Tool:
    """kitchen's search tool declared without descriptions, so the tiny model's prompt is mostly
    the renderer's fixed tool preamble and the question (fewer positions to find the name among)."""
    return replace(search_tool(index, top_k), description="", arguments=Query)


@dataclass(frozen=True)
class Question:
    question: str
    answer: str
    title: str


def load_questions(path: str) -> list[Question]:
    """The questions; a bad line is a DataError naming the file and line."""
    questions = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            questions.append(Question(str(row["question"]), str(row["answer"]), str(row["title"])))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DataError(f'{path} line {number}: a question is {{"question", "answer", "title"}} ({exc})') from None
    return questions


def check_questions(settings: SearchSettings) -> None:
    """Every question (training and held out) asks about a document of the corpus, and no held-out
    question is also a training one: a user corpus given with the shipped held-out file (the
    default) is refused before work starts, naming it."""
    titles = {document.title for document in SearchIndex.open(settings.corpus, settings.index_dir).documents}
    files = [("env.questions", settings.questions, load_questions(settings.questions))]
    if settings.held_out is not None:
        files.append(("env.held_out", settings.held_out, load_questions(settings.held_out)))
    for key, path, questions in files:
        for number, question in enumerate(questions, start=1):
            if question.title not in titles:
                instead = " or env.held_out=null (a random sample of env.questions is held out)"
                raise DataError(
                    f"{key} ({path}), question {number}: its title {question.title!r} is no document of "
                    f"env.corpus ({settings.corpus}); give questions about your corpus"
                    + (instead if key == "env.held_out" else "")
                )
    if settings.held_out is not None:
        trained = {question.question for question in files[0][2]}
        for number, question in enumerate(files[1][2], start=1):
            if question.question in trained:
                raise DataError(
                    f"env.held_out ({settings.held_out}), question {number}: {question.question!r} is also a "
                    f"training question of env.questions ({settings.questions}); a held-out question must not be"
                )


def normalize(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (SQuAD's answer normalisation)."""
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def grade(question: Question, format_coef: float) -> Callable[[list[Message]], tuple[float, Metrics]]:
    """The grader of one question's episodes (see the module doc)."""

    def grader(messages: list[Message]) -> tuple[float, Metrics]:
        reply = messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""
        _, marked, answer = reply.partition("Answer:")
        correct = float(bool(marked) and normalize(answer) == normalize(question.answer))
        searched = float(any(m["role"] == "tool" for m in messages))
        return format_coef * (float(bool(marked)) - 1) + correct, {
            "search/correct": correct,
            "search/format": float(bool(marked)),
            "search/searched": searched,
        }

    return grader


@dataclass(frozen=True)
class SearchGroupBuilder(EnvGroupBuilder):
    question: Question
    renderer: Renderer
    toolbox: Toolbox
    settings: SearchSettings
    group_size: int

    async def make_envs(self) -> list[ToolUseEnv]:
        ask = [Message(role="user", content=self.question.question)]
        grader = grade(self.question, self.settings.format_coef)
        return [
            ToolUseEnv(self.renderer, self.toolbox, ask, grader, self.settings.max_turns)
            for _ in range(self.group_size)
        ]

    def logging_tags(self) -> list[str]:
        return ["search"]


class Questions(RLDataset):
    def __init__(self, make: object, questions: list[Question], groups: int, batches: int, seed: int) -> None:
        self.make, self.questions, self.groups, self.batches, self.seed = make, questions, groups, batches, seed

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        rng = random.Random(f"search/{self.seed}/{index}")
        return [self.make(q) for q in rng.sample(self.questions, min(self.groups, len(self.questions)))]  # type: ignore[operator]

    def __len__(self) -> int:
        return self.batches


@dataclass(frozen=True)
class Teacher:
    """Searches the question's subject and answers from the result; `error_rate` of the time it
    answers another question's answer without searching."""

    renderer: Renderer
    toolbox: Toolbox
    questions: list[Question]
    error_rate: float

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        return [self._episode(rng) for _ in range(count)]

    def _episode(self, rng: random.Random) -> list[Message]:
        q = rng.choice(self.questions)
        messages = [Message(role="user", content=q.question)]
        if rng.random() < self.error_rate:
            messages.append(Message(role="assistant", content=f"Answer: {rng.choice(self.questions).answer}"))
        else:
            call = ToolCall(name="search", arguments={"query": q.title})
            result = self.toolbox.tools[0].fn(query=q.title)
            messages += [
                Message(role="assistant", content="", tool_calls=[call]),
                Message(role="tool", content=result, name="search"),
                Message(role="assistant", content=f"Answer: {q.answer}"),
            ]
        return self.renderer.declare_tools(messages, self.toolbox.specs)


def search_task(settings: SearchSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    """Questions about the corpus, with a search tool over its cached index; a held-out sample."""
    index = SearchIndex.open(settings.corpus, settings.index_dir)
    toolbox = Toolbox([terse_search_tool(index, settings.top_k)])
    questions = load_questions(settings.questions)
    sample = random.Random(f"search-eval/{config.seed}").sample
    if settings.held_out is None:
        held_out = sample(questions, min(settings.num_eval_questions, len(questions) - 1))
        train = [q for q in questions if q not in held_out]
    else:
        pool = load_questions(settings.held_out)
        held_out, train = sample(pool, min(settings.num_eval_questions, len(pool))), questions

    def make(question: Question) -> EnvGroupBuilder:
        return SearchGroupBuilder(question, renderer, toolbox, settings, config.rl.group_size)

    return RLTask(
        train=Questions(make, train, config.rl.groups_per_batch, config.rl.num_batches, config.seed),
        eval_builders=[make(q) for q in held_out],
        demonstrations=Teacher(renderer, toolbox, train, settings.teacher_error_rate),
    )
