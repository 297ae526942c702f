# ruff: noqa: E501  (golden prompts are compared as the sources write them)
"""Each benchmark on its fixture (a few items in its hub format, `bench_fixtures/`, read through
the real loaders as a local copy): the prompt is the published one (golden strings from the
cited source), a right reply is graded right and a wrong one wrong, and the metrics follow.
The replies are scripted (`scripted.py`); the prompts, extraction, graders, sandbox and
metrics are the benchmarks' own."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from recipes.benchmarks.bfcl import check_calls, decode_calls
from recipes.benchmarks.code import lcb_private_tests
from tests.eval.hf_offline import snapshot
from tests.eval.scripted import ScriptedSampler, evaluate

MGSM = (
    "Solve this math problem. Give the reasoning steps before giving the final answer on the last line by itself in "
    'the format of "Answer:". Do not add anything other than the integer answer after "Answer:".\n\n'
)
MATH = (
    "Solve the following math problem step by step. The last line of your response should be of the form Answer: "
    "$ANSWER (without quotes) where $ANSWER is the answer to the problem.\n\n"
)
MATH_END = (
    '\n\nRemember to put your answer on its own line after "Answer:", and you do not need to use a \\boxed command.'
)


def data(repo: str) -> str:
    return str(snapshot(repo))


def run(task: str, repo: str, reply: Any, **settings: Any) -> tuple[Any, ScriptedSampler]:
    return evaluate(task, reply, dataset=data(repo), **settings)


def values(result: Any) -> dict[str, float]:
    return {name: round(estimate.value, 6) for name, estimate in result.metrics.items()}


def test_gsm8k_mgsm_prompt_and_last_number_after_answer() -> None:
    result, _ = run(
        "gsm8k", "openai/gsm8k", lambda p, k: "6*14 = 84, minus 9.\nAnswer: 75" if "baker" in p else "Answer: $2,500"
    )
    assert result.samples[0].prompt == "user: " + MGSM + (
        "A baker fills 6 trays with 14 rolls each and sells all but 9 rolls. How many rolls does he sell?"
    )
    assert values(result)["accuracy"] == 1.0 and result.samples[1].extra["answer"] == "2500"
    wrong, _ = run("gsm8k", "openai/gsm8k", lambda p, k: "Answer: 74\n" if "baker" in p else "The total is 2500.")
    assert values(wrong)["accuracy"] == 0.0
    assert [s.reason for s in wrong.samples] == ["answer '74' != '75'", 'no "Answer:" line']


@pytest.mark.parametrize(
    ("task", "repo", "question", "right", "wrong"),
    [
        ("math500", "HuggingFaceH4/MATH-500", "What is $\\frac{3}{4} + \\frac{1}{8}$?", "Answer: 7/8", "Answer: 0.8"),
        (
            "aime24",
            "HuggingFaceH4/aime_2024",
            "Find the remainder when $7^{100}$ is divided by $1000$.",
            "Answer: 001",
            "Answer: 7",
        ),
        (
            "aime25",
            "math-ai/aime25",
            "Find the sum of all positive integers $n < 20$ such that $n^2 + 1$ is prime.",
            "answer: 30",
            "Answer: 31",
        ),
    ],
)
def test_math_simple_evals_prompt_graded_by_math_verify(
    task: str, repo: str, question: str, right: str, wrong: str
) -> None:
    result, _ = run(task, repo, lambda p, k: f"Work.\n{right}" if question in p else "Answer: 6\nAnswer: 5", limit=1)
    assert result.samples[0].prompt == "user: " + MATH + question + MATH_END
    assert values(result)["accuracy"] == 1.0, result.samples[0].reason
    assert values(run(task, repo, lambda p, k: wrong, limit=1)[0])["accuracy"] == 0.0


def test_math500_first_answer_line_counts() -> None:
    # simple-evals reads the first "Answer:" match; the second item's reference is 6
    result, _ = run("math500", "HuggingFaceH4/MATH-500", lambda p, k: "Answer: 6\nAnswer: 5")
    assert [s.extra["correct"] for s in result.samples] == [False, True]


def test_gpqa_diamond_simple_evals_prompt_and_shuffle() -> None:
    result, _ = run(
        "gpqa_diamond",
        "Idavidrein/gpqa",
        lambda p, k: "Nitrogen.\nAnswer: C" if "gas" in p else "Answer: $B$",
        repeats=1,
    )
    assert result.samples[0].prompt == (
        "user: Answer the following multiple choice question. The last line of your response should be of the "
        "following format: 'Answer: $LETTER' (without quotes) where LETTER is one of ABCD. Think step by step before "
        "answering.\n\nWhich gas makes up most of Earth's atmosphere by volume?\n\n"
        "A) Carbon dioxide\nB) Oxygen\nC) Nitrogen\nD) Argon"
    )
    first, second = result.samples
    assert first.extra["correct"] and first.extra["answer"] == "C"
    assert second.extra["answer"] == "B" and second.extra["correct"] == ("B) 1\n" in second.prompt)
    four, _ = run("gpqa_diamond", "Idavidrein/gpqa", lambda p, k: "Answer: A")
    shown_first = [("A) Nitrogen\n" in s.prompt) or ("A) 1\n" in s.prompt) for s in four.samples]
    assert len(four.samples) == 8 and values(four)["accuracy"] == sum(shown_first) / 8


def test_mmlu_pro_five_shot_prompt_and_extraction() -> None:
    result, _ = run(
        "mmlu_pro",
        "TIGER-Lab/MMLU-Pro",
        lambda p, k: "2 + 2 = 4. The **answer is (C)**." if "2 + 2" in p else "Answer: B",
    )
    options = "Options: A. 2\nB. 3\nC. 4\nD. 5\nE. 6\nF. 7\nG. 8\nH. 9\nI. 10\n"
    assert result.samples[0].prompt == (
        "user: The following are multiple choice questions (with answers) about math. Think step by step and then "
        'output the answer in the format of "The answer is (X)" at the end.\n\n'
        f"Question: What is 1 + 1?\n{options}Answer: Let's think step by step. One plus one is two. The answer is (A).\n\n"
        f"Question: What is 2 + 2?\n{options}Answer: Let's think step by step.\n\n"
    )
    assert values(result)["accuracy"] == 1.0
    wrong, _ = run("mmlu_pro", "TIGER-Lab/MMLU-Pro", lambda p, k: "The answer is (D)", limit=1)
    assert wrong.samples[0].extra["answer"] == "D" and values(wrong)["accuracy"] == 0.0
    # no letter at all: TIGER-Lab's seeded random guess among the question's 9 options
    guessed, _ = run("mmlu_pro", "TIGER-Lab/MMLU-Pro", lambda p, k: "no idea", limit=1)
    assert (
        guessed.samples[0].reason.startswith("no letter: random guess")
        and guessed.samples[0].extra["answer"] in "ABCDEFGHI"
    )


def test_ifeval_instruction_checkers_strict_and_loose() -> None:
    def reply(p: str, k: int) -> str:
        if "cat" in p:
            return "a cat is a small soft animal that naps a lot"
        return "**Tea is a warm drink from leaves.**\nIs there anything else I can help with?\n*"

    result, _ = run("ifeval", "google/IFEval", reply)
    assert result.samples[0].prompt == "user: Describe a cat in lowercase letters only. Do not use any commas."
    assert result.samples[0].extra["details"] == {"strict": [True, True], "loose": [True, True]}
    # the trailing "*" line breaks the end phrase strictly; loose drops the last line
    assert result.samples[1].extra["details"] == {"strict": [True, False], "loose": [True, True]}
    assert values(result) == {
        "prompt_level_strict_acc": 0.5,
        "inst_level_strict_acc": 0.75,
        "prompt_level_loose_acc": 1.0,
        "inst_level_loose_acc": 1.0,
    }


EVALPLUS = "Please provide a self-contained Python script that solves the following problem in a markdown code block:"
OPENING = "Below is a Python script with a self-contained function that solves the problem and passes corresponding tests:\n```python\n"


def test_humaneval_plus_evalplus_prompt_and_plus_tests_in_the_sandbox() -> None:
    result, sampler = run(
        "humaneval_plus",
        "evalplus/humanevalplus",
        lambda p, k: "def add_one(x):\n    return x + 1\n```",
        sandbox="process",
    )
    task = 'def add_one(x: int) -> int:\n    """Return x plus one.\n    >>> add_one(1)\n    2\n    """'
    assert result.samples[0].prompt == f"user: {EVALPLUS}\n```\n{task}\n```\n"
    assert sampler.prompts[0].endswith("Assistant:" + OPENING)
    assert values(result)["accuracy"] == 1.0, result.samples[0].reason
    # right on the base test (1 -> 2), wrong on a plus input (10**12)
    capped, _ = run(
        "humaneval_plus",
        "evalplus/humanevalplus",
        lambda p, k: "def add_one(x):\n    return min(x, 10**6) + 1\n```",
        sandbox="process",
    )
    assert values(capped)["accuracy"] == 0.0 and capped.samples[0].reason.startswith("failed")


def test_mbpp_plus_evalplus_prompt_and_tests() -> None:
    result, _ = run(
        "mbpp_plus", "evalplus/mbppplus", lambda p, k: "def square(n):\n    return n * n\n```", sandbox="process"
    )
    assert result.samples[0].prompt == (
        f'user: {EVALPLUS}\n```\n"""\nWrite a function to return the square of a number.\nassert square(3) == 9\n"""\n```\n'
    )
    assert values(result)["accuracy"] == 1.0, result.samples[0].reason
    wrong, _ = run(
        "mbpp_plus",
        "evalplus/mbppplus",
        lambda p, k: "def square(n):\n    return abs(n) * 3 if n == 3 else n * n + (n == 7)\n```",
        sandbox="process",
    )
    assert values(wrong)["accuracy"] == 0.0


def test_livecodebench_prompt_stdin_and_functional_tests() -> None:
    def reply(p: str, k: int) -> str:
        if "Double" in p or "2 * n" in p:
            return "```python\nclass Solution:\n    def double(self, n: int) -> int:\n        return 2 * n\n```"
        return "```python\na, b = map(int, input().split())\nprint(a + b)\n```"

    result, _ = run("livecodebench", "livecodebench/code_generation_lite", reply, sandbox="process")
    system = (
        "system: You are an expert Python programmer. You will be given a question (problem specification) and will "
        "generate a correct Python program that matches the specification and passes all tests.\n"
    )
    assert result.samples[1].prompt == system + (
        "user: ### Question:\nGiven an integer n, return 2 * n.\n\n### Format: You will use the following starter code "
        "to write the solution to the problem and enclose your code within delimiters.\n```python\nclass Solution:\n"
        "    def double(self, n: int) -> int:\n        \n```\n\n### Answer: (use the provided format with backticks)\n\n"
    )
    assert [s.extra["correct"] for s in result.samples] == [True, True], [s.reason for s in result.samples]
    # the private case (10 20 -> 30) is decoded from its compressed pickle and run too
    first_only, _ = run(
        "livecodebench",
        "livecodebench/code_generation_lite",
        lambda p, k: "```python\nprint(3)\n```",
        sandbox="process",
        limit=1,
    )
    assert first_only.samples[0].reason == "1/2 tests passed"
    windowed, _ = run(
        "livecodebench", "livecodebench/code_generation_lite", reply, sandbox="process", start_date="2024-10-01"
    )
    assert len(windowed.samples) == 1


def test_livecodebench_private_tests_refuse_pickled_objects() -> None:
    import base64
    import pickle
    import zlib

    hostile = base64.b64encode(zlib.compress(pickle.dumps(json.loads))).decode()
    with pytest.raises(pickle.UnpicklingError, match="refused"):
        lcb_private_tests(hostile)


def test_bfcl_system_prompt_and_ast_match() -> None:
    def reply(p: str, k: int) -> str:
        if "base 10" in p:
            return "[triangle_area(base=10, height=5)]"
        if "Paris" in p:
            return "[weather.get(city='paris')]"
        if "Oslo" in p:
            return "```\n[weather.get(city='Rome'), weather.get(city='Oslo')]\n```"
        return "[triangle_area(base=3, height=4, unit='units'), weather.get(city='Lima')]"

    result, _ = run("bfcl", "gorilla-llm/Berkeley-Function-Calling-Leaderboard", reply)
    prompt = result.samples[0].prompt
    assert prompt.startswith(
        "system: You are an expert in composing functions.You are given a question and a set of possible functions. "
    )
    assert (
        "[func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)].  You SHOULD NOT"
        in prompt
    )
    assert (
        'Here is a list of functions in json format that you can invoke.\n[\n    {\n        "name": "triangle_area"'
        in prompt
    )
    assert values(result) == {
        "simple_python_accuracy": 1.0,
        "multiple_accuracy": 1.0,
        "parallel_accuracy": 1.0,
        "parallel_multiple_accuracy": 1.0,
        "overall": 1.0,
    }


def test_bfcl_reads_a_local_copy_with_v4_names(tmp_path: Path) -> None:
    # bfcl-eval's data folder names the files BFCL_v4_<category>.json, with v4 ids
    hub = snapshot("gorilla-llm/Berkeley-Function-Calling-Leaderboard")
    for folder in ("", "possible_answer/"):
        (tmp_path / folder).mkdir(exist_ok=True)
        text = (hub / f"{folder}BFCL_v3_simple.json").read_text().replace('"simple_0"', '"simple_python_0"')
        (tmp_path / f"{folder}BFCL_v4_simple_python.json").write_text(text)
    result, _ = evaluate(
        "bfcl", lambda p, k: "[triangle_area(base=10, height=5)]", dataset=str(tmp_path), categories=["simple_python"]
    )
    assert values(result)["simple_python_accuracy"] == 1.0
    assert result.samples[0].extra["where"] == "BFCL_v4_simple_python.json simple_python_0"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("[triangle_area(base=10, height=6)]", "parameter 'height' = 6 is not among [5]"),
        ("[triangle_area(base='10', height=5)]", "parameter 'base' has type str"),
        ("[triangle_area(base=10)]", "missing required parameter 'height'"),
        ("[triangle_area(base=10, height=5, color='red')]", "unexpected parameter 'color'"),
        ("[area(base=10, height=5)]", "not among the functions"),
        ("[triangle_area(base=10, height=5), triangle_area(base=10, height=5)]", "2 calls, expected 1"),
    ],
)
def test_bfcl_ast_checker_refusals(reply: str, reason: str) -> None:
    function = {
        "name": "triangle_area",
        "parameters": {
            "type": "dict",
            "properties": {"base": {"type": "integer"}, "height": {"type": "integer"}, "unit": {"type": "string"}},
            "required": ["base", "height"],
        },
    }
    answers = [{"triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}]
    found = check_calls(decode_calls(reply), [function], answers)
    assert found is not None and reason in found


def _judge(prefers: str) -> ScriptedSampler:
    from adapters.common.tokenizer import load_tokenizer

    tokenizer = load_tokenizer("tiny")
    verdicts = {"model": "[[B>>A]]", "baseline": "[[A>B]]"}

    def reply(prompt: str, k: int) -> str:  # arena-hard: which answer is "the model's" in this game
        first_is_model = "<|The Start of Assistant A's Answer|>\nMODEL ANSWER" in prompt
        verdict = verdicts[prefers]
        return f"My final verdict: {verdict.translate(str.maketrans('AB', 'BA')) if first_is_model else verdict}"

    def label_logprob(label: str) -> float:
        return {"m": -2.0, "M": -0.1}[label]

    return ScriptedSampler(tokenizer, reply, label_logprob)


def test_alpacaeval2_judge_prompt_win_rate_and_length_control() -> None:
    judge = _judge("model")
    result, _ = run(
        "alpacaeval2_lc",
        "tatsu-lab/alpaca_eval",
        lambda p, k: "MODEL ANSWER",
        judge_sampler=judge,
        judge="judge-model",
        judge_renderer="role_colon",
    )
    asked = judge.prompts if judge.prompts else []
    assert not asked  # the judge is scored on its two labels, never sampled
    p_big_m = 1 / (1 + 2.718281828459045 ** (-2.0 + 0.1))
    # the model is shown as M or m by a per-instruction coin; the judge always prefers M
    wins = [s.grade for s in result.samples]
    assert all(w == pytest.approx(p_big_m) or w == pytest.approx(1 - p_big_m) for w in wins)
    assert values(result)["win_rate"] == pytest.approx(sum(wins) / 3, abs=1e-6)
    assert 0.0 <= values(result)["length_controlled_winrate"] <= 1.0


CREATIVE_JUDGE = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI assistants to the user prompt displayed below. You will be given assistant A's answer and assistant B's answer. Your job is to evaluate which assistant's answer is better.\n\n"
    "When evaluating the assistants' answers, compare both assistants' answers. You must identify and correct any mistakes or inaccurate information.\n\n"
    "Then consider if the assistant's answers are helpful, relevant, and concise. Helpful means the answer correctly responds to the prompt or follows the instructions. Note when user prompt has any ambiguity or more than one interpretation, it is more helpful and appropriate to ask for clarifications or more information from the user than providing an answer based on assumptions. Relevant means all parts of the response closely connect or are appropriate to what is being asked. Concise means the response is clear and not verbose or excessive.\n\n"
    "Then consider the creativity and novelty of the assistant's answers when needed. Finally, identify any missing important information in the assistants' answers that would be beneficial to include when responding to the user prompt.\n\n"
    "After providing your explanation, you must output only one of the following choices as your final verdict with a label:\n\n"
    "1. Assistant A is significantly better: [[A>>B]]\n2. Assistant A is slightly better: [[A>B]]\n3. Tie, relatively the same: [[A=B]]\n4. Assistant B is slightly better: [[B>A]]\n5. Assistant B is significantly better: [[B>>A]]\n\n"
    'Example output: "My final verdict is tie: [[A=B]]".'
)
"""arena-hard-auto `utils/judge_utils.py`, JUDGE_SETTINGS["creative_writing"]["system_prompt"]."""


def test_arena_hard_two_games_weighted_verdicts_and_category_baselines() -> None:
    for prefers, expected in (("model", 1.0), ("baseline", 0.0)):
        judge = _judge(prefers)
        result, _ = run(
            "arena_hard",
            "lmarena-ai/arena-hard-auto",
            lambda p, k: "MODEL ANSWER",
            judge_sampler=judge,
            judge="judge-model",
            judge_renderer="role_colon",
        )
        assert values(result) == {"hard_prompt_score": expected, "creative_writing_score": expected}, [
            s.reason for s in result.samples
        ]
        assert result.metrics["hard_prompt_score"].n == 2 and result.metrics["creative_writing_score"].n == 1
    assert "verdicts" in result.samples[0].reason
    # two games per question; each category's baseline answer and system prompt
    assert len(judge.prompts) == 6
    poem = [p for p in judge.prompts if "poem about rain" in p]
    assert len(poem) == 2 and all("Rain taps the glass,\nthe street hums back." in p for p in poem)
    assert all(p.startswith("System: " + CREATIVE_JUDGE + "\n") for p in poem)
    queue = [p for p in judge.prompts if "use of a queue" in p]
    assert all("Begin your evaluation by generating your own answer" in p for p in queue)
    assert all("Scheduling print jobs." in p for p in queue)
    only_hard, _ = run(
        "arena_hard",
        "lmarena-ai/arena-hard-auto",
        lambda p, k: "MODEL ANSWER",
        judge_sampler=_judge("model"),
        judge="judge-model",
        judge_renderer="role_colon",
        categories=["hard_prompt"],
    )
    assert list(only_hard.metrics) == ["hard_prompt_score"] and len(only_hard.samples) == 2


def test_arena_hard_question_without_a_verdict_is_left_out() -> None:
    judge = _judge("model")
    judge.reply = lambda p, k: (
        "I cannot decide."
        if "hash map" in p
        else "[[B>>A]]"
        if "Assistant A's Answer|>\nScheduling" in p
        else "[[A>>B]]"
    )
    result, _ = run(
        "arena_hard",
        "lmarena-ai/arena-hard-auto",
        lambda p, k: "MODEL ANSWER",
        judge_sampler=judge,
        judge="judge-model",
        judge_renderer="role_colon",
        categories=["hard_prompt"],
    )
    assert result.metrics["hard_prompt_score"].n == 1 and values(result)["hard_prompt_score"] == 1.0
    assert result.samples[0].reason.startswith("no verdict")


def test_judged_benchmark_without_a_judge_says_so() -> None:
    from kitchen import ConfigError

    with pytest.raises(ConfigError, match=r"arena_hard.judge=MODEL"):
        run("arena_hard", "lmarena-ai/arena-hard-auto", lambda p, k: "x")


@pytest.mark.parametrize(
    ("task", "repo", "module"),
    [("ifeval", "google/IFEval", "if_verifiable"), ("alpacaeval2_lc", "tatsu-lab/alpaca_eval", "alpaca_eval.metrics")],
)
def test_a_missing_extra_is_named_before_any_sampling(
    task: str, repo: str, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kitchen import ConfigError

    monkeypatch.setitem(sys.modules, module, None)  # as if the package were not installed
    replies: list[str] = []

    def reply(prompt: str, k: int) -> str:
        replies.append(prompt)
        return "x"

    judged: dict[str, Any] = {"judge": "judge-model", "judge_sampler": _judge("model")} if task != "ifeval" else {}
    with pytest.raises(ConfigError, match=r"needs the 'evals' extra.*: pip install 'kitchen\[evals\]'"):
        run(task, repo, reply, **judged)
    assert replies == []
