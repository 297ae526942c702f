"""Twenty questions: guesses told from questions, the answerer's replies as heard, the teacher's
games, bad noun lists, and whole games on the noop backend with scripted policy and answerer."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from kitchen import DataError
from kitchen.testing import RunResult
from recipes.envs.twenty_questions import (
    DEFAULT_NOUNS,
    UNCLEAR,
    TeacherGames,
    load_nouns,
    named_noun,
    read_answer,
)

NOUNS = load_nouns(DEFAULT_NOUNS)
NAMES = [n.noun for n in NOUNS]
QUESTIONS = list(NOUNS[0].answers)


def test_the_shipped_list_tells_every_noun_apart() -> None:
    codes = {tuple(n.answers[q] for q in QUESTIONS) for n in NOUNS}
    assert len(codes) == len(NOUNS) and all(list(n.answers) == QUESTIONS for n in NOUNS)


@pytest.mark.parametrize(
    ("text", "noun"),
    [("Is it a cat?", "cat"), ("Is it an animal?", None), ("cats?", None), ("Is it a cow or a cat? cow", "cow")],
)
def test_a_reply_naming_a_noun_is_the_guess(text: str, noun: str | None) -> None:
    assert named_noun(text, NAMES) == noun


@pytest.mark.parametrize(
    ("text", "heard"), [("Yes.", "Yes."), (" no, it is not", "No."), ("maybe", UNCLEAR), ("", UNCLEAR)]
)
def test_the_answer_is_heard_as_yes_no_or_unclear(text: str, heard: str) -> None:
    assert read_answer(text) == heard


def test_the_teacher_asks_then_guesses_a_fitting_noun_unless_it_slips() -> None:
    games = TeacherGames(NOUNS, 5, 0.5)(random.Random(0), 200)
    fitting = 0
    for game in games:
        asked = [m["content"] for m in game[1:-1] if m["role"] == "assistant"]
        heard = [m["content"] for m in game[1:] if m["role"] == "user"]
        assert asked == QUESTIONS
        guess = named_noun(game[-1]["content"], NAMES)
        noun = next(n for n in NOUNS if n.noun == guess)
        fitting += all(("Yes." if noun.answers[q] else "No.") == h for q, h in zip(asked, heard, strict=True))
    assert 0.5 < fitting / len(games) < 0.75


def test_a_bad_noun_list_is_named_by_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "nouns.jsonl"
    path.write_text(
        json.dumps({"noun": "cat", "answers": {}}) + "\n" + json.dumps({"noun": "dog", "answers": {"q": "yes"}}) + "\n"
    )
    with pytest.raises(DataError, match=r"nouns.jsonl.*2.*answers"):
        load_nouns(str(path))


def scripted(answerer: Callable[[str, str], str]) -> Callable[[str], str]:
    """The noop model's replies: the answerer's from `answerer(secret, question)`; the policy asks
    the list's questions in order, then names the noun that fits the answers it heard."""

    def reply(prompt: str) -> str:
        secret = re.search(r"The secret is (\w+)\. Answer yes or no\. (.*?)\n", prompt)
        if secret:
            return answerer(secret.group(1), secret.group(2))
        heard = re.findall(r"(Yes\.|No\.|" + re.escape(UNCLEAR) + ")", prompt.split("then guess it")[-1])
        if len(heard) < len(QUESTIONS):
            return QUESTIONS[len(heard)]
        heard_as = {q: h for q, h in zip(QUESTIONS, heard, strict=True)}
        fits = [n for n in NOUNS if all(("Yes." if n.answers[q] else "No.") == h for q, h in heard_as.items())]
        return f"Is it a {fits[0].noun if fits else NAMES[0]}?"

    return reply


def truthful(secret: str, question: str) -> str:
    noun = next(n for n in NOUNS if n.noun == secret)
    return "Yes." if noun.answers[question] else "No."


# On noop the answerer is the base model (the shipped answerer is a local-backend checkpoint).
SHORT = (
    "rl.num_batches=2",
    "warm_start.steps=2",
    "eval.every=1",
    "rl.groups_per_batch=4",
    "rl.group_size=2",
    "env.answerer.checkpoint=null",
)


def test_a_player_who_hears_true_answers_wins_every_game(kitchen_run: Callable[..., RunResult]) -> None:
    run = kitchen_run("twenty_questions", *SHORT, "sampling.max_tokens=16", replies=scripted(truthful))
    for row in run.metrics:
        assert row["eval/all/won"] == 1.0 and row["env/all/won"] == 1.0
        assert row["eval/all/questions"] == len(QUESTIONS) and row["eval/all/clear_answer"] == 1.0
        assert row["eval/all/answer_as_listed"] == 1.0
        assert row["eval/all/total_episodes"] == 2 * len(NOUNS)


def test_the_answerer_is_a_model_the_env_asks(kitchen_run: Callable[..., RunResult]) -> None:
    run = kitchen_run(
        "twenty_questions", *SHORT, "sampling.max_tokens=16", replies=scripted(lambda secret, question: "Perhaps.")
    )
    assert all(row["eval/all/clear_answer"] == 0.0 and row["eval/all/answer_as_listed"] == 0.0 for row in run.metrics)
    assert run.metrics[-1]["eval/all/won"] < 1.0  # no answers: the policy cannot tell the nouns apart
    calls = run.backend.calls  # type: ignore[attr-defined]
    opened = [c.summary["base_model"] for c in calls if c.method == "create_sampling_client"]
    assert opened.count("tiny") == 1  # the answerer, opened once under its own name
