# ruff: noqa: E501  (fixture rows read best one per line)
"""Writes `hub/`: a few items of each benchmark's dataset, in the files and schema its hub repo
has, laid out as Hugging Face hub cache entries (`datasets--ORG--NAME/refs/main` and
`snapshots/<commit>/...`). The items are written for these tests (never copied from a benchmark:
no test set leaks through kitchen's repository); the formats are the hub's.

    python tests/eval/bench_fixtures/make_fixtures.py
"""

from __future__ import annotations

import base64
import hashlib
import json
import pickle
import shutil
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

HUB = Path(__file__).parent / "hub"


def snapshot(repo: str, readme: str | None = None) -> Path:
    commit = hashlib.sha1(repo.encode()).hexdigest()
    entry = HUB / ("datasets--" + repo.replace("/", "--"))
    (entry / "refs").mkdir(parents=True, exist_ok=True)
    (entry / "refs" / "main").write_text(commit)
    folder = entry / "snapshots" / commit
    folder.mkdir(parents=True, exist_ok=True)
    if readme is not None:
        (folder / "README.md").write_text(f"---\n{readme.strip()}\n---\n")
    return folder


def jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def main() -> None:
    shutil.rmtree(HUB, ignore_errors=True)
    gsm8k = snapshot(
        "openai/gsm8k", "configs:\n- config_name: main\n  data_files:\n  - split: test\n    path: main/test-*"
    )
    parquet(
        gsm8k / "main/test-00000-of-00001.parquet",
        [
            {
                "question": "A baker fills 6 trays with 14 rolls each and sells all but 9 rolls. How many rolls does he sell?",
                "answer": "He bakes 6*14=<<6*14=84>>84 rolls.\nHe sells 84-9=<<84-9=75>>75 rolls.\n#### 75",
            },
            {
                "question": "Mia saves $1,250 a month for 2 months. How much does she save?",
                "answer": "She saves 1250*2=<<1250*2=2500>>2500 dollars.\n#### 2,500",
            },
        ],
    )
    math500 = snapshot("HuggingFaceH4/MATH-500")
    jsonl(
        math500 / "test.jsonl",
        [
            {
                "problem": "What is $\\frac{3}{4} + \\frac{1}{8}$?",
                "solution": "$\\frac{6}{8}+\\frac{1}{8}=\\boxed{\\frac{7}{8}}$.",
                "answer": "\\frac{7}{8}",
                "subject": "Prealgebra",
                "level": 1,
                "unique_id": "test/prealgebra/0001.json",
            },
            {
                "problem": "Solve for $x$: $2x + 5 = 17$.",
                "solution": "$2x = 12$, so $x = \\boxed{6}$.",
                "answer": "6",
                "subject": "Algebra",
                "level": 1,
                "unique_id": "test/algebra/0002.json",
            },
        ],
    )
    aime24 = snapshot("HuggingFaceH4/aime_2024")
    parquet(
        aime24 / "data/train-00000-of-00001.parquet",
        [
            {
                "id": 60,
                "problem": "Find the remainder when $7^{100}$ is divided by $1000$.",
                "solution": "...",
                "answer": "1",
                "url": "",
                "year": "2024",
            },
            {
                "id": 61,
                "problem": "How many positive divisors does $720$ have?",
                "solution": "...",
                "answer": "30",
                "url": "",
                "year": "2024",
            },
        ],
    )
    aime25 = snapshot("math-ai/aime25")
    jsonl(
        aime25 / "test.jsonl",
        [
            {
                "problem": "Find the sum of all positive integers $n < 20$ such that $n^2 + 1$ is prime.",
                "answer": "30",
                "id": "0",
            },
            {"problem": "Compute $\\binom{10}{3}$.", "answer": "120", "id": "1"},
        ],
    )
    gpqa = snapshot(
        "Idavidrein/gpqa",
        "configs:\n- config_name: gpqa_diamond\n  data_files:\n  - split: train\n    path: gpqa_diamond.csv",
    )
    gpqa_rows = [
        {
            "Question": "Which gas makes up most of Earth's atmosphere by volume?",
            "Correct Answer": "Nitrogen",
            "Incorrect Answer 1": "Oxygen",
            "Incorrect Answer 2": "Argon",
            "Incorrect Answer 3": "Carbon dioxide",
            "Explanation": "About 78% is nitrogen.",
            "Subdomain": "Chemistry (general)",
            "Record ID": "recFIXTURE1",
            "High-level domain": "Chemistry",
        },
        {
            "Question": "What is the spin of a photon?",
            "Correct Answer": "1",
            "Incorrect Answer 1": "1/2",
            "Incorrect Answer 2": "0",
            "Incorrect Answer 3": "3/2",
            "Explanation": "Photons are vector bosons.",
            "Subdomain": "Quantum Mechanics",
            "Record ID": "recFIXTURE2",
            "High-level domain": "Physics",
        },
    ]
    pa_csv.write_csv(pa.Table.from_pylist(gpqa_rows), gpqa / "gpqa_diamond.csv")
    mmlu = snapshot(
        "TIGER-Lab/MMLU-Pro",
        "configs:\n- config_name: default\n  data_files:\n  - split: test\n    path: data/test-*\n  - split: validation\n    path: data/validation-*",
    )
    options = ["2", "3", "4", "5", "6", "7", "8", "9", "10", "N/A"]
    parquet(
        mmlu / "data/test-00000-of-00001.parquet",
        [
            {
                "question_id": 70,
                "question": "What is 2 + 2?",
                "options": options,
                "answer": "C",
                "answer_index": 2,
                "cot_content": "",
                "category": "math",
                "src": "fixture",
            },
            {
                "question_id": 71,
                "question": "Which organ pumps blood?",
                "options": ["Liver", "Heart", "Lung", "Kidney"],
                "answer": "B",
                "answer_index": 1,
                "cot_content": "",
                "category": "biology",
                "src": "fixture",
            },
        ],
    )
    parquet(
        mmlu / "data/validation-00000-of-00001.parquet",
        [
            {
                "question_id": 0,
                "question": "What is 1 + 1?",
                "options": options,
                "answer": "A",
                "answer_index": 0,
                "cot_content": "A: Let's think step by step. One plus one is two. The answer is (A).",
                "category": "math",
                "src": "fixture",
            },
            {
                "question_id": 1,
                "question": "Which cell part holds DNA?",
                "options": ["Nucleus", "Membrane"],
                "answer": "A",
                "answer_index": 0,
                "cot_content": "A: Let's think step by step. DNA is kept in the nucleus. The answer is (A).",
                "category": "biology",
                "src": "fixture",
            },
        ],
    )
    ifeval = snapshot("google/IFEval")
    jsonl(
        ifeval / "ifeval_input_data.jsonl",
        [
            {
                "key": 1000,
                "prompt": "Describe a cat in lowercase letters only. Do not use any commas.",
                "instruction_id_list": ["change_case:english_lowercase", "punctuation:no_comma"],
                "kwargs": [{}, {}],
            },
            {
                "key": 1001,
                "prompt": 'Write about tea in at least 5 words. End your response with the exact phrase "Is there anything else I can help with?"',
                "instruction_id_list": ["length_constraints:number_words", "startend:end_checker"],
                "kwargs": [
                    {"relation": "at least", "num_words": 5},
                    {"end_phrase": "Is there anything else I can help with?"},
                ],
            },
        ],
    )
    assertion = (
        "def assertion(out, exp, atol):\n"
        "    if atol == 0 and isinstance(exp, float):\n        atol = 1e-6\n"
        "    if atol != 0:\n        assert abs(out - exp) <= atol, f'{out} != {exp}'\n"
        "    else:\n        assert out == exp, f'{out} != {exp}'\n"
    )
    humaneval = snapshot(
        "evalplus/humanevalplus",
        "configs:\n- config_name: default\n  data_files:\n  - split: test\n    path: data/test-*",
    )
    parquet(
        humaneval / "data/test-00000-of-00001.parquet",
        [
            {
                "task_id": "HumanEval/900",
                "prompt": 'def add_one(x: int) -> int:\n    """Return x plus one.\n    >>> add_one(1)\n    2\n    """\n',
                "canonical_solution": "    return x + 1\n",
                "entry_point": "add_one",
                "test": assertion
                + "\n\ndef check(candidate):\n    inputs = [[1], [-1], [10**12]]\n    results = [2, 0, 10**12 + 1]\n"
                "    for i, (inp, exp) in enumerate(zip(inputs, results)):\n        assertion(candidate(*inp), exp, 0)\n",
            },
        ],
    )
    mbpp = snapshot(
        "evalplus/mbppplus", "configs:\n- config_name: default\n  data_files:\n  - split: test\n    path: data/test-*"
    )
    parquet(
        mbpp / "data/test-00000-of-00001.parquet",
        [
            {
                "task_id": 900,
                "code": "def square(n):\n    return n * n\n",
                "prompt": "Write a function to return the square of a number.",
                "source_file": "fixture",
                "test_imports": [],
                "test_list": ["assert square(3) == 9", "assert square(0) == 0", "assert square(-2) == 4"],
                "test": assertion + "\ninputs = [[3], [0], [-2], [7]]\nresults = [9, 0, 4, 49]\n"
                "for i, (inp, exp) in enumerate(zip(inputs, results)):\n    assertion(square(*inp), exp, 0)\n",
            },
        ],
    )
    lcb = snapshot("livecodebench/code_generation_lite")
    private = base64.b64encode(
        zlib.compress(pickle.dumps(json.dumps([{"input": "10 20\n", "output": "30\n", "testtype": "stdin"}])))
    ).decode()
    jsonl(
        lcb / "test.jsonl",
        [
            {
                "question_title": "Sum of Two",
                "question_content": "Read two integers A and B and print A + B.",
                "platform": "atcoder",
                "question_id": "fixture_a",
                "contest_id": "fixture",
                "contest_date": "2024-09-01T00:00:00",
                "starter_code": "",
                "difficulty": "easy",
                "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
                "private_test_cases": private,
                "metadata": "{}",
            },
            {
                "question_title": "Double It",
                "question_content": "Given an integer n, return 2 * n.",
                "platform": "leetcode",
                "question_id": "fixture_b",
                "contest_id": "fixture",
                "contest_date": "2024-10-05T00:00:00",
                "starter_code": "class Solution:\n    def double(self, n: int) -> int:\n        ",
                "difficulty": "easy",
                "public_test_cases": json.dumps([{"input": "3", "output": "6", "testtype": "functional"}]),
                "private_test_cases": json.dumps([{"input": "-4", "output": "-8", "testtype": "functional"}]),
                "metadata": json.dumps({"func_name": "double"}),
            },
        ],
    )
    for n in range(2, 7):
        (lcb / f"test{n}.jsonl").write_text("")
    bfcl = snapshot("gorilla-llm/Berkeley-Function-Calling-Leaderboard")
    area = {
        "name": "triangle_area",
        "description": "Area of a triangle.",
        "parameters": {
            "type": "dict",
            "properties": {
                "base": {"type": "integer", "description": "base"},
                "height": {"type": "integer", "description": "height"},
                "unit": {"type": "string", "description": "unit"},
            },
            "required": ["base", "height"],
        },
    }
    weather = {
        "name": "weather.get",
        "description": "Weather of a city.",
        "parameters": {
            "type": "dict",
            "properties": {"city": {"type": "string", "description": "city"}},
            "required": ["city"],
        },
    }
    cases = {
        "simple_python": (
            [area],
            "Area of a triangle with base 10 and height 5?",
            [{"triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}],
        ),
        "multiple": (
            [area, weather],
            "What is the weather in Paris?",
            [{"weather.get": {"city": ["Paris", "Paris, France"]}}],
        ),
        "parallel": (
            [weather],
            "Weather in Oslo and in Rome?",
            [{"weather.get": {"city": ["Oslo"]}}, {"weather.get": {"city": ["Rome"]}}],
        ),
        "parallel_multiple": (
            [area, weather],
            "Weather in Lima, and the area of a triangle with base 3 and height 4?",
            [
                {"weather.get": {"city": ["Lima"]}},
                {"triangle_area": {"base": [3], "height": [4], "unit": ["", "units"]}},
            ],
        ),
    }
    for category, (functions, question, truth) in cases.items():  # the hub repo's v3 names and ids
        name = "simple" if category == "simple_python" else category
        jsonl(
            bfcl / f"BFCL_v3_{name}.json",
            [{"id": f"{name}_0", "question": [[{"role": "user", "content": question}]], "function": functions}],
        )
        jsonl(bfcl / f"possible_answer/BFCL_v3_{name}.json", [{"id": f"{name}_0", "ground_truth": truth}])
    alpaca = snapshot("tatsu-lab/alpaca_eval")
    alpaca_rows = [
        {
            "dataset": "fixture",
            "instruction": "Name a primary color.",
            "output": "Red is a primary color.",
            "generator": "gpt4_turbo",
        },
        {"dataset": "fixture", "instruction": "Say hello in French.", "output": "Bonjour!", "generator": "gpt4_turbo"},
        {
            "dataset": "fixture",
            "instruction": "What is 3 times 3?",
            "output": "3 times 3 is 9.",
            "generator": "gpt4_turbo",
        },
    ]
    (alpaca / "alpaca_eval_gpt4_baseline.json").write_text(json.dumps(alpaca_rows, indent=4))
    gamed = ["model,index,instruction_difficulty,not_gamed_baseline,preference,std_delta_len"]
    for model, preference, delta in (("a", 1.2, 0.5), ("b", 1.7, -0.3), ("c", 1.5, 1.0), ("d", 1.4, -1.2)):
        gamed += [
            f"{model},{i},{0.1 * (i + 1) - 0.2},True,{preference + 0.05 * i},{delta - 0.1 * i}"
            for i in range(len(alpaca_rows))
        ]
    (alpaca / "df_gamed.csv").write_text("\n".join(gamed) + "\n")
    arena = snapshot("lmarena-ai/arena-hard-auto")
    questions = [
        {
            "uid": "fixture01",
            "category": "hard_prompt",
            "subcategory": "fixture",
            "prompt": "Explain what a hash map is in one sentence.",
        },
        {"uid": "fixture02", "category": "hard_prompt", "subcategory": "fixture", "prompt": "Give one use of a queue."},
        {
            "uid": "fixture03",
            "category": "creative_writing",
            "subcategory": "fixture",
            "prompt": "Write a two-line poem about rain.",
        },
    ]
    jsonl(arena / "data/arena-hard-v2.0/question.jsonl", questions)
    answers = {
        "o3-mini-2025-01-31": {"fixture01": "A table from keys to values.", "fixture02": "Scheduling print jobs."},
        "gemini-2.0-flash-001": {"fixture03": "Rain taps the glass,\nthe street hums back."},
    }
    for model, by_uid in answers.items():  # each category's baseline answers its own questions
        jsonl(
            arena / f"data/arena-hard-v2.0/model_answer/{model}.jsonl",
            [
                {
                    "uid": q["uid"],
                    "ans_id": f"ans-{q['uid']}",
                    "model": model,
                    "messages": [
                        {"role": "user", "content": q["prompt"]},
                        {"role": "assistant", "content": {"answer": by_uid[q["uid"]]}},
                    ],
                    "tstamp": 0.0,
                    "metadata": {},
                }
                for q in questions
                if q["uid"] in by_uid
            ],
        )


if __name__ == "__main__":
    main()
