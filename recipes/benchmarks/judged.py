"""Benchmarks judged by a model: the target answers, a judge model (any model the backend serves,
named by `judge`; `judge_model_name` is a judge checkpoint's base model) compares its answer with
a baseline model's published answer.

- `alpacaeval2_lc`: tatsu-lab/alpaca_eval (805 instructions, the GPT-4 Turbo baseline outputs),
  AlpacaEval 2's judge prompt (`alpaca_eval_clf_gpt4_turbo`), the two outputs in a per-
  instruction random order; the judge's preference is its probability of naming the model's
  identifier (`m` or `M`), from the logprobs of both one-token answers, as AlpacaEval's
  `logprob_parser` reads them. Metrics: win_rate, and length_controlled_winrate computed by
  AlpacaEval's own GLM (`alpaca_eval.metrics.get_length_controlled_winrate`, the `evals` extra).
- `arena_hard`: Arena-Hard-Auto v2.0 (lmarena-ai/arena-hard-auto: question.jsonl and the
  baselines' model_answer files), judged as its `gen_judgment.py` does: each question's category
  picks the baseline and the judge's system prompt (`JUDGE_SETTINGS`: hard prompts against
  o3-mini with the original prompt, creative writing against Gemini 2.0 Flash with the prompt
  that drops "generate your own answer"), two games per question (the baseline first, then the
  target first), the verdict read by its patterns (`[[A>>B]]` ...), strong verdicts counted three
  times, a question with a missing verdict left out; `<category>_score` = the target's mean
  outcome against that category's baseline (what `show_result.py` reports per category), with a
  bootstrap standard error over questions.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import re
from collections.abc import Sequence
from typing import Any
from unittest import mock

from pydantic import Field

from kitchen import ConfigError, DataError
from kitchen.families.evaluation import (
    Estimate,
    EvalModel,
    EvalSettings,
    EvalTask,
    Grade,
    Item,
    TaskResult,
    evaluate_generation,
    hub_file,
    mean_with_stderr,
    require,
    strip_thinking,
)
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.renderers.registry import get_renderer, recommended_renderer
from train_core.renderers.train_on_what import TrainOnWhat
from train_core.types import SamplingParams

ALPACA_JUDGE_SYSTEM = (
    "You are a highly efficient assistant, who evaluates and selects the best large language model (LLMs) based on "
    "the quality of their responses to a given instruction. This process will be used to create a leaderboard "
    "reflecting the most accurate and human-preferred answers.\n"
)
ALPACA_JUDGE_USER = """I require a leaderboard for various large language models. I'll provide you with prompts given to these models and their corresponding outputs. Your task is to assess these responses, and select the model that produces the best output from a human perspective.

## Instruction

{
    "instruction": \"\"\"{instruction}\"\"\",
}

## Model Outputs

Here are the unordered outputs from the models. Each output is associated with a specific model, identified by a unique model identifier.

{
    {
        "model_identifier": "m",
        "output": \"\"\"{output_1}\"\"\"
    },
    {
        "model_identifier": "M",
        "output": \"\"\"{output_2}\"\"\"
    }
}

## Task

Evaluate the models based on the quality and relevance of their outputs, and select the model that generated the best output. Answer by providing the model identifier of the best model. We will use your output as the name of the best model, so make sure your output only contains one of the following model identifiers and nothing else (no quotes, no spaces, no new lines, ...): m or M.

## Best Model Identifier
"""  # noqa: E501
"""AlpacaEval `evaluators_configs/alpaca_eval_clf_gpt4_turbo/alpaca_eval_clf.txt` (system, then user)."""

ARENA_HARD_SYSTEM = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI assistants to the "
    "user prompt displayed below. You will be given assistant A's answer and assistant B's answer. Your job is to "
    "evaluate which assistant's answer is better.\n\nBegin your evaluation by generating your own answer to the "
    "prompt. You must provide your answers before judging any answers.\n\nWhen evaluating the assistants' answers, "
    "compare both assistants' answers with your answer. You must identify and correct any mistakes or inaccurate "
    "information.\n\nThen consider if the assistant's answers are helpful, relevant, and concise. Helpful means the "
    "answer correctly responds to the prompt or follows the instructions. Note when user prompt has any ambiguity or "
    "more than one interpretation, it is more helpful and appropriate to ask for clarifications or more information "
    "from the user than providing an answer based on assumptions. Relevant means all parts of the response closely "
    "connect or are appropriate to what is being asked. Concise means the response is clear and not verbose or "
    "excessive.\n\nThen consider the creativity and novelty of the assistant's answers when needed. Finally, "
    "identify any missing important information in the assistants' answers that would be beneficial to include when "
    "responding to the user prompt.\n\nAfter providing your explanation, you must output only one of the following "
    "choices as your final verdict with a label:\n\n1. Assistant A is significantly better: [[A>>B]]\n2. Assistant A "
    "is slightly better: [[A>B]]\n3. Tie, relatively the same: [[A=B]]\n4. Assistant B is slightly better: "
    '[[B>A]]\n5. Assistant B is significantly better: [[B>>A]]\n\nExample output: "My final verdict is tie: '
    '[[A=B]]".'
)
"""arena-hard-auto `utils/judge_utils.py`, OG_ARENA_HARD_PROMPT."""
ARENA_HARD_CREATIVE_SYSTEM = ARENA_HARD_SYSTEM.replace(
    "Begin your evaluation by generating your own answer to the prompt. You must provide your answers before "
    "judging any answers.\n\n",
    "",
).replace("compare both assistants' answers with your answer.", "compare both assistants' answers.")
"""arena-hard-auto `utils/judge_utils.py`, JUDGE_SETTINGS["creative_writing"]: the original prompt
without the judge's own answer."""
ARENA_HARD_JUDGING: dict[str, tuple[str, str]] = {
    "hard_prompt": ("o3-mini-2025-01-31", ARENA_HARD_SYSTEM),
    "coding": ("o3-mini-2025-01-31", ARENA_HARD_SYSTEM),
    "math": ("o3-mini-2025-01-31", ARENA_HARD_SYSTEM),
    "creative_writing": ("gemini-2.0-flash-001", ARENA_HARD_CREATIVE_SYSTEM),
}
"""arena-hard-auto `utils/judge_utils.py`, JUDGE_SETTINGS: a category's baseline and system prompt."""
ARENA_HARD_TEMPLATE = (
    "<|User Prompt|>\n{QUESTION}\n\n<|The Start of Assistant A's Answer|>\n{ANSWER_A}\n<|The End of Assistant A's "
    "Answer|>\n\n<|The Start of Assistant B's Answer|>\n{ANSWER_B}\n<|The End of Assistant B's Answer|>"
)
"""arena-hard-auto `config/arena-hard-v2.0.yaml`, prompt_template."""
ARENA_HARD_PATTERNS = (re.compile(r"\[\[([AB<>=]+)\]\]"), re.compile(r"\[([AB<>=]+)\]"))
ARENA_HARD_WEIGHT = 3
"""arena-hard-auto `show_result.py`: a strong verdict counts this many times."""
_STRONG = ARENA_HARD_WEIGHT
LABEL_SCORE: dict[str, list[float]] = {
    **{"A>B": [1.0], "A>>B": [1.0] * _STRONG, "A=B": [0.5], "A<<B": [0.0] * _STRONG, "A<B": [0.0]},
    **{"B>A": [0.0], "B>>A": [0.0] * _STRONG, "B=A": [0.5], "B<<A": [1.0] * _STRONG, "B<A": [1.0]},
}
"""arena-hard-auto `show_result.py`, label_to_score: the outcome for assistant A."""


class JudgedSettings(EvalSettings):
    dataset: str | None = Field(None, description="a local copy of the benchmark's hub repo (a folder)")
    judge: str | None = Field(None, description="the judge: a model the backend serves, or a checkpoint path")
    judge_model_name: str | None = Field(
        None, description="the judge's base model (its tokenizer), when judge is a checkpoint"
    )
    judge_renderer: str | None = Field(None, description="the judge's renderer (default: the one recommended for it)")
    judge_max_tokens: int = Field(16000, ge=1, description="most tokens of a judge's verdict (arena_hard)")
    bootstrap_resamples: int = Field(1000, ge=2, description="resamples behind arena_hard's standard error")
    max_tokens: int = Field(32768, ge=1, description="most tokens sampled per reply")
    temperature: float = Field(0.7, ge=0, description="sampling temperature of the target's replies")


class Judge:
    """The judge model: its sampler, renderer and tokenizer."""

    def __init__(self, sampler: Any, renderer: Renderer, tokenizer: Any) -> None:
        self.sampler, self.renderer, self.tokenizer = sampler, renderer, tokenizer

    async def label_logprobs(self, messages: list[Message], labels: Sequence[str]) -> list[float]:
        """The judge's log-probability of replying exactly each label (no sampling)."""
        examples = [
            self.renderer.build_supervised_example(
                [*messages, Message(role="assistant", content=label)], TrainOnWhat.LAST_ASSISTANT_MESSAGE
            )
            for label in labels
        ]
        outputs = await asyncio.gather(*(self.sampler.compute_logprobs(tokens) for tokens, _ in examples))
        return [
            sum(float(lp) for lp, w in zip(logprobs, list(weights), strict=True) if lp is not None and w)
            for (_, weights), logprobs in zip(examples, outputs, strict=True)
        ]

    async def reply(self, messages: list[Message], max_tokens: int, seed: int) -> str:
        params = SamplingParams(
            max_tokens=max_tokens, temperature=0.0, seed=seed, stop=self.renderer.get_stop_sequences()
        )
        result = await self.sampler.sample(self.renderer.build_generation_prompt(messages), 1, params)
        message, _ = self.renderer.parse_response(result.sequences[0].tokens)
        content = message.get("content", "")
        return strip_thinking(content if isinstance(content, str) else json.dumps(content))


async def open_judge(model: EvalModel, settings: JudgedSettings, task: str) -> Judge:
    if settings.judge is None:
        raise ConfigError(f"{task} needs a judge model: {task}.judge=MODEL (any model this backend serves)")
    if model.open_tokenizer is None:
        raise ConfigError(f"{task}: this evaluation cannot open a second model for the judge")
    base = settings.judge_model_name or settings.judge
    tokenizer = model.open_tokenizer(base)
    try:
        renderer = get_renderer(settings.judge_renderer or recommended_renderer(base), tokenizer)
    except ValueError as exc:
        raise ConfigError(f"{task}.judge_renderer: {exc}") from None
    return Judge(await model.open_sampler(settings.judge), renderer, tokenizer)


def _swapped(instruction: str) -> bool:
    return hashlib.sha256(instruction.encode()).digest()[0] % 2 == 1


def alpaca_judge_messages(instruction: str, output_1: str, output_2: str) -> list[Message]:
    user = (
        ALPACA_JUDGE_USER.replace("{instruction}", instruction)
        .replace("{output_1}", output_1)
        .replace("{output_2}", output_2)
    )
    return [Message(role="system", content=ALPACA_JUDGE_SYSTEM), Message(role="user", content=user)]


ALPACA_INSTALL_HINT = "alpacaeval2_lc's length control needs the 'evals' extra: pip install 'kitchen[evals]'"


def _glm_winrate() -> Any:
    try:
        from alpaca_eval.metrics import glm_winrate
    except ImportError:
        raise ConfigError(ALPACA_INSTALL_HINT) from None
    return glm_winrate


def length_controlled(annotations: list[dict[str, Any]], local: str | None) -> Estimate:
    """AlpacaEval 2's length-controlled win rate, fitted by AlpacaEval's own GLM code. Its
    instruction difficulties (`df_gamed.csv`) come from the same place as the instructions: the
    hub, or the local copy."""
    glm_winrate = _glm_winrate()
    gamed = str(hub_file("tatsu-lab/alpaca_eval", "df_gamed.csv", local))
    with mock.patch.object(glm_winrate, "hf_hub_download", lambda *args, **kwargs: gamed):
        metrics = glm_winrate.get_length_controlled_winrate(
            annotations, save_weights_dir=None, is_warn_extreme_changes=False
        )
    return Estimate(
        float(metrics["length_controlled_winrate"]) / 100, float(metrics["lc_standard_error"]) / 100, len(annotations)
    )


async def _alpacaeval(model: EvalModel, settings: JudgedSettings) -> TaskResult:
    _glm_winrate()  # before any sampling: say which extra is missing
    path = hub_file("tatsu-lab/alpaca_eval", "alpaca_eval_gpt4_baseline.json", settings.dataset)
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise DataError(f"{path}: not JSON ({exc})") from None
    items = [
        Item([Message(role="user", content=row["instruction"])], {**row, "index": i}, f"{path.name} item {i + 1}")
        for i, row in enumerate(rows)
    ]
    judge = await open_judge(model, settings, "alpacaeval2_lc")

    async def grade(item: Item, reply: str) -> Grade:
        baseline, swapped = str(item.record["output"]), _swapped(item.record["instruction"])
        first, second = (reply, baseline) if swapped else (baseline, reply)
        lp_m, lp_M = await judge.label_logprobs(
            alpaca_judge_messages(item.record["instruction"], first, second), ["m", "M"]
        )
        p_second = 1 / (1 + math.exp(lp_m - lp_M))
        p_model = 1 - p_second if swapped else p_second
        details = {"index": item.record["index"], "baseline_chars": len(baseline), "model_chars": len(reply)}
        return Grade(p_model > 0.5, p_model, f"judge prefers the model with probability {p_model:.3f}", None, details)

    def summary(items: Sequence[Item], grades_I: Sequence[Sequence[Grade]]) -> dict[str, Estimate]:
        grades = [g for grades in grades_I for g in grades]
        annotations = [
            {
                "index": g.details["index"],
                "output_1": "x" * g.details["baseline_chars"],
                "output_2": "x" * g.details["model_chars"],
                "preference": 1 + g.score,
                "generator_1": "gpt4_turbo",
                "generator_2": "model",
                "annotator": "judge",
            }
            for g in grades
        ]
        return {
            "win_rate": mean_with_stderr([g.score for g in grades]),
            "length_controlled_winrate": length_controlled(annotations, settings.dataset),
        }

    return await evaluate_generation(model, items, grade, settings, summary)


def arena_verdict(judgment: str) -> str | None:
    """arena-hard-auto's `get_score`: the last match of the first pattern that matches."""
    for pattern in ARENA_HARD_PATTERNS:
        matches = [m for m in pattern.findall(judgment.upper()) if m != ""]
        if matches:
            return matches[-1].strip("\n")
    return None


class ArenaHardSettings(JudgedSettings):
    categories: list[str] = Field(
        ["hard_prompt", "creative_writing"],
        description="the question categories evaluated, each against its baseline: any of "
        + ", ".join(ARENA_HARD_JUDGING),
    )


ARENA_HARD_REPO = "lmarena-ai/arena-hard-auto"
ARENA_HARD_DATA = "data/arena-hard-v2.0"


def _baseline_answers(model: str, local: str | None) -> dict[str, str]:
    """The published answers of a baseline, by question uid (the answer, not its thinking)."""
    path = hub_file(ARENA_HARD_REPO, f"{ARENA_HARD_DATA}/model_answer/{model}.jsonl", local)
    answers = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
                content = row["messages"][-1]["content"]
                answers[str(row["uid"])] = content["answer"] if isinstance(content, dict) else str(content)
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise DataError(
                    f"{path.name} line {n}: not an arena-hard answer ({type(exc).__name__}: {exc})"
                ) from None
    return answers


def arena_hard_items(settings: ArenaHardSettings) -> list[Item]:
    """The questions of the chosen categories, each with its category's baseline answer."""
    unknown = sorted(set(settings.categories) - set(ARENA_HARD_JUDGING))
    if unknown:
        raise ConfigError(
            f"arena_hard.categories: unknown {unknown[0]!r} (categories: {', '.join(ARENA_HARD_JUDGING)})"
        )
    path = hub_file(ARENA_HARD_REPO, f"{ARENA_HARD_DATA}/question.jsonl", settings.dataset)
    questions = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                questions.append((n, json.loads(line)))
            except ValueError as exc:
                raise DataError(f"{path.name} line {n}: not JSON ({exc})") from None
    baselines: dict[str, dict[str, str]] = {}
    items = []
    for n, question in questions:
        require(question, ("uid", "category", "prompt"), f"{path.name} line {n}")
        category = question["category"]
        if category not in settings.categories:
            continue
        model, system = ARENA_HARD_JUDGING[category]
        if model not in baselines:
            baselines[model] = _baseline_answers(model, settings.dataset)
        if question["uid"] not in baselines[model]:
            raise DataError(f"{model}.jsonl: no answer to question {question['uid']} ({category})")
        record = {
            "uid": question["uid"],
            "category": category,
            "question": question["prompt"],
            "baseline": baselines[model][question["uid"]],
            "system": system,
        }
        items.append(Item([Message(role="user", content=question["prompt"])], record, f"question {question['uid']}"))
    return items


def arena_hard_outcomes(first: str | None, second: str | None) -> list[float] | None:
    """The target's outcomes from the verdicts of the two games (`first`: the baseline is
    assistant A; `second`: the target is), as `show_result.py` counts them; None without both."""
    if first not in LABEL_SCORE or second not in LABEL_SCORE:
        return None
    return LABEL_SCORE[str(second)] + [1 - s for s in LABEL_SCORE[str(first)]]


def bootstrap_mean(rows: Sequence[Sequence[float]], resamples: int, seed: int) -> Estimate:
    """The mean of all outcomes, with a standard error from resampling the rows (questions)."""
    if not rows:
        return Estimate(float("nan"), None, 0)

    def score(picked: Sequence[Sequence[float]]) -> float:
        flat = [o for row in picked for o in row]
        return sum(flat) / len(flat)

    rng = random.Random(seed)
    boot = [score([rows[rng.randrange(len(rows))] for _ in rows]) for _ in range(resamples)]
    mean = sum(boot) / len(boot)
    stderr = (sum((b - mean) ** 2 for b in boot) / (len(boot) - 1)) ** 0.5
    return Estimate(score(rows), stderr, len(rows))


async def _arena_hard(model: EvalModel, settings: ArenaHardSettings) -> TaskResult:
    items = arena_hard_items(settings)
    judge = await open_judge(model, settings, "arena_hard")

    async def game(record: dict[str, Any], answer_a: str, answer_b: str, seed: int) -> str | None:
        user = ARENA_HARD_TEMPLATE.format(QUESTION=record["question"], ANSWER_A=answer_a, ANSWER_B=answer_b)
        messages = [Message(role="system", content=record["system"]), Message(role="user", content=user)]
        return arena_verdict(await judge.reply(messages, settings.judge_max_tokens, seed))

    async def grade(item: Item, reply: str) -> Grade:
        record = dict(item.record)
        first, second = await asyncio.gather(
            game(record, record["baseline"], reply, 0), game(record, reply, record["baseline"], 1)
        )
        outcomes = arena_hard_outcomes(first, second)
        details = {"category": record["category"], "outcomes": outcomes or []}
        if outcomes is None:
            return Grade(False, 0.5, f"no verdict (games: {first!r}, {second!r})", None, details)
        score = sum(outcomes) / len(outcomes)
        return Grade(score > 0.5, score, f"verdicts {first} (baseline first), {second} (model first)", None, details)

    def summary(items: Sequence[Item], grades_I: Sequence[Sequence[Grade]]) -> dict[str, Estimate]:
        by_category: dict[str, list[list[float]]] = {}
        for item, grades in zip(items, grades_I, strict=True):
            outcomes = [o for g in grades for o in g.details["outcomes"]]
            judged = by_category.setdefault(item.record["category"], [])
            if outcomes:
                judged.append(outcomes)
        return {
            f"{category}_score": bootstrap_mean(rows, settings.bootstrap_resamples, settings.seed)
            for category, rows in by_category.items()
        }

    return await evaluate_generation(model, items, grade, settings, summary)


ALPACAEVAL2_LC = EvalTask(
    "alpacaeval2_lc",
    "AlpacaEval 2 (805), judged against GPT-4 Turbo, length-controlled win rate",
    _alpacaeval,
    JudgedSettings,
)
ARENA_HARD = EvalTask("arena_hard", "Arena-Hard-Auto v2.0, judged against its baseline", _arena_hard, ArenaHardSettings)
