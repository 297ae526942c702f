"""The benchmarks people report, by name, each with its published prompt, answer extraction,
grader and metrics, its data read from the Hugging Face hub (`TASK:PATH` for a local copy):
registered as eval tasks through the `kitchen.eval_tasks` entry points in `pyproject.toml`.

- `math_tasks`: gsm8k (simple-evals' MGSM prompt), math500, aime24, aime25 (simple-evals' MATH
  prompt), graded by math-verify;
- `choice`: gpqa_diamond (simple-evals), mmlu_pro (TIGER-Lab's 5-shot chain of thought);
- `ifeval`: IFEval's instruction checkers (the `if-verifiable` package);
- `code`: humaneval_plus, mbpp_plus (EvalPlus prompts and tests), livecodebench, run in the sandbox;
- `bfcl`: function calls graded by AST match, as BFCL does;
- `judged`: alpacaeval2_lc and arena_hard, judged by a model named in the settings.

`docs/reference/benchmarks.md` gives each one's source, sampling and how its number compares.
"""
