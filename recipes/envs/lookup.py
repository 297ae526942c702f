"""The lookup environment: questions about a small shipped corpus of (fictional) towns, answered by
an agent written as ordinary code against the `openai` client (recipes/agents/lookup.py) with two
tools, `search` and `read`. Reward 1 when the final answer contains the right answer; the facts
are invented, so only the tools can find them. The demonstrations for a warm start come from a
teacher who searches, reads the first hit and answers from it, except that `teacher_error_rate` of
the time it skips the tools and guesses.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import openai
from pydantic import Field

from kitchen import Section
from kitchen.families.rl import RLLoopSettings, RLSettings
from recipes.agents.lookup import CORPUS, TOOLS, Corpus, answer
from recipes.envs.search import Question
from recipes.envs.search import load_questions as read_questions
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message, ToolCall
from train_core.rl.task import RLTask
from train_core.rl.types import EnvGroupBuilder, RLDataset

if TYPE_CHECKING:  # kitchen.integrations.agents serves over FastAPI: imported when a run builds episodes
    from kitchen.integrations.agents import AgentEndpoint

QUESTIONS = Path(__file__).resolve().parents[1] / "data" / "lookup" / "questions.jsonl"


class LookupSettings(Section):
    """Config section `env` of lookup_agent: the agent's budget, the held-out questions, the teacher."""

    max_calls: int = Field(4, ge=1, description="chat completion calls the agent makes per question")
    num_eval_questions: int = Field(6, ge=0, description="held-out questions scored every eval.every steps")
    teacher_error_rate: float = Field(
        0.3, ge=0, le=1, description="share of warm-start episodes in which the teacher guesses without the tools"
    )


def load_questions(path: Path = QUESTIONS) -> list[Question]:
    """The shipped questions (search_tool's format and loader)."""
    return read_questions(str(path))


def lookup_agent(corpus: Corpus, max_calls: int) -> Any:
    async def agent(endpoint: AgentEndpoint, question: Question) -> str:
        client = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
        async with client:
            return await answer(client, endpoint.model, question.question, corpus, max_calls)

    return agent


def grade(question: Question, reply: str) -> tuple[float, dict[str, float]]:
    right = question.answer.lower() in reply.lower()
    return float(right), {"lookup/answered": float(bool(reply.strip()))}


@dataclass(frozen=True)
class Teacher:
    """Searches the town's name, reads the first hit and answers from it; guesses `error_rate` of
    the time (another town's fact of the same kind)."""

    renderer: Renderer
    questions: list[Question]
    corpus: Corpus
    error_rate: float

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        return [self._episode(rng) for _ in range(count)]

    def _episode(self, rng: random.Random) -> list[Message]:
        q = rng.choice(self.questions)
        messages = [Message(role="user", content=q.question)]
        if rng.random() < self.error_rate:
            same_kind = [o for o in self.questions if o.question.split()[:2] == q.question.split()[:2] and o != q]
            messages.append(Message(role="assistant", content=rng.choice(same_kind).answer))
        else:
            for name, args in (("search", {"query": q.title}), ("read", {"title": q.title})):
                result = self.corpus.run(name, json.dumps(args))
                messages.append(Message(role="assistant", content="", tool_calls=[ToolCall(name=name, arguments=args)]))
                messages.append(Message(role="tool", content=result, name=name))
            messages.append(Message(role="assistant", content=q.answer))
        return self.renderer.declare_tools(messages, TOOLS)


class Questions(RLDataset):
    def __init__(
        self, agent: Any, questions: list[Question], renderer: Renderer, rl: RLLoopSettings, seed: int
    ) -> None:
        self.agent, self.questions, self.renderer, self.rl, self.seed = agent, questions, renderer, rl, seed

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        from kitchen.integrations.agents import AgentGroupBuilder

        rng = random.Random(f"lookup/{self.seed}/{index}")
        return [
            AgentGroupBuilder(self.agent, q, grade, self.renderer, self.rl.group_size, "lookup")
            for q in rng.sample(self.questions, self.rl.groups_per_batch)
        ]

    def __len__(self) -> int:
        return self.rl.num_batches


def lookup_task(settings: LookupSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    """Questions about the shipped corpus, asked of the openai-client agent; a held-out sample."""
    from kitchen.integrations.agents import AgentGroupBuilder

    corpus = Corpus.load(CORPUS)
    questions = load_questions()
    rng = random.Random(f"lookup-eval/{config.seed}")
    held_out = rng.sample(questions, settings.num_eval_questions)
    train = [q for q in questions if q not in held_out]
    agent = lookup_agent(corpus, settings.max_calls)
    return RLTask(
        train=Questions(agent, train, renderer, config.rl, config.seed),
        eval_builders=[AgentGroupBuilder(agent, q, grade, renderer, config.rl.group_size, "lookup") for q in held_out],
        demonstrations=Teacher(renderer, train, corpus, settings.teacher_error_rate),
    )
