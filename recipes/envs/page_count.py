"""Page count: a synthetic many-turn env for long episodes (the RL numerics check).

The policy is shown a document one page per turn and, after the last page, asked how many times
a word appeared in it (`Answer: <count>`). The reward is the closeness of the count:
`max(0, 1 - |predicted - true| / (reward_tolerance * true))`, 0 for no answer. The task is only a
reason for many turns and a long context: pages are seeded random text over a fixed vocabulary.

The episode's history is kept as tokens, never re-rendered: each turn's prompt is the previous
prompt, the sampled reply and the new observation's tokens, so every turn extends the last and
the whole episode trains as one datum whose tokens are exactly those the sampler saw.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from kitchen import ConfigError
from kitchen.families.rl import EnvSettings, EnvSpec, RLSettings
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.task import RLTask
from train_core.rl.types import Action, Env, EnvGroupBuilder, RLDataset, StepResult
from train_core.types import ModelInput, StopCondition

TARGET_WORDS = ("after", "before", "during", "under", "until", "while", "through", "between")
"""The words a document's count is about."""

_FILLER = (
    "the a of and to in is was for on that with as by it from at his an were are which this be or "
    "has had first one their its new also city year two river people north south team game house "
    "water road time film album song war church school state group line part world early small"
)
FILLER_WORDS = tuple(_FILLER.split())
"""Common English words the pages are made of (target words are mixed in at `target_rate`)."""

_ANSWER = re.compile(r"answer\s*:\s*(-?\d[\d,]*)", re.IGNORECASE)


def read_answer(text: str) -> int | None:
    """The integer after the last `Answer:` in a reply, or None."""
    found = _ANSWER.findall(text)
    return int(found[-1].replace(",", "")) if found else None


def closeness_reward(predicted: int | None, true_count: int, tolerance: float) -> float:
    """1 for the exact count, falling linearly to 0 at a relative error of `tolerance`; 0 unanswered."""
    if predicted is None:
        return 0.0
    return max(0.0, 1.0 - abs(predicted - true_count) / max(true_count, 1) / tolerance)


@dataclass(frozen=True)
class Document:
    word: str
    pages: tuple[str, ...]

    @property
    def true_count(self) -> int:
        return sum(page.split().count(self.word) for page in self.pages)

    def intro(self) -> Message:
        return Message(
            role="user",
            content=(
                f'Count how many times the word "{self.word}" appears in a document of {len(self.pages)} pages. '
                "I show one page per turn; reply to see the next. After the last page, reply with "
                f"Answer: <count>.\n\n[Page 1]\n{self.pages[0]}"
            ),
        )

    def observation(self, shown: int) -> str:
        """What the env says after `shown` pages: the next page, or the request for the answer."""
        if shown < len(self.pages):
            return f"[Page {shown + 1}]\n{self.pages[shown]}"
        return "That was the last page. Reply with Answer: <count>."


def make_document(rng: random.Random, num_pages: int, page_words: int, target_rate: float) -> Document:
    """A seeded document: `num_pages` pages of `page_words` words, each a target word with
    probability `target_rate` (any of them) and a filler word otherwise; one target is the word asked."""
    pages = tuple(
        " ".join(
            rng.choice(TARGET_WORDS) if rng.random() < target_rate else rng.choice(FILLER_WORDS)
            for _ in range(page_words)
        )
        for _ in range(num_pages)
    )
    return Document(rng.choice(TARGET_WORDS), pages)


class PageCountEnv(Env):
    """One episode over a document: `num_pages + 1` turns, the last one the answer."""

    def __init__(self, document: Document, renderer: Renderer, reward_tolerance: float) -> None:
        self.document = document
        self.renderer = renderer
        self.reward_tolerance = reward_tolerance
        self.prompt: list[int] = []
        self.shown = 0

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        self.prompt = self.renderer.build_generation_prompt([self.document.intro()]).to_ints()
        self.shown = 1
        return ModelInput.from_ints(self.prompt), self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        if self.shown > len(self.document.pages):
            message, _ = self.renderer.parse_response(action)
            predicted = read_answer(message["content"])
            true_count = self.document.true_count
            return StepResult(
                reward=closeness_reward(predicted, true_count, self.reward_tolerance),
                episode_done=True,
                next_observation=ModelInput.empty(),
                next_stop_condition=self.renderer.get_stop_sequences(),
                metrics={
                    "answer_parsed": float(predicted is not None),
                    "exact_match": float(predicted == true_count),
                    "episode_tokens": float(len(self.prompt) + len(action)),
                },
            )
        self.prompt = [*self.prompt, *action, *self._turn_tokens(self.document.observation(self.shown))]
        self.shown += 1
        return StepResult(
            reward=0.0,
            episode_done=False,
            next_observation=ModelInput.from_ints(self.prompt),
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={},
        )

    def _turn_tokens(self, text: str) -> list[int]:
        """The tokens the renderer writes after a reply's content: the end of the assistant's turn,
        `text` as the user's next message and the next generation prompt."""
        intro = self.document.intro()
        before = self.renderer.build_generation_prompt([intro]).to_ints()
        after = self.renderer.build_generation_prompt(
            [intro, Message(role="assistant", content=""), Message(role="user", content=text)]
        ).to_ints()
        if after[: len(before)] != before:
            raise ConfigError(
                f"env page_count: renderer {type(self.renderer).__name__} re-renders the prompt when a turn "
                "is added, so an episode's turns cannot extend each other"
            )
        return after[len(before) :]


@dataclass(frozen=True)
class PageCountGroupBuilder(EnvGroupBuilder):
    """`group_size` episodes over the same document."""

    document: Document
    renderer: Renderer
    group_size: int
    reward_tolerance: float

    async def make_envs(self) -> list[PageCountEnv]:
        return [PageCountEnv(self.document, self.renderer, self.reward_tolerance) for _ in range(self.group_size)]

    def logging_tags(self) -> list[str]:
        return ["page_count"]


class PageCountSettings(EnvSettings):
    name: Literal["page_count"] = Field("page_count", description="count a word over a document read page by page")
    num_pages: int = Field(4, ge=1, description="pages per document: an episode takes num_pages + 1 turns")
    page_words: int = Field(200, ge=1, description="words per page (about 1.7 tokens each on tiny)")
    target_rate: float = Field(0.02, ge=0, le=1, description="share of a page's words that are target words")
    reward_tolerance: float = Field(0.2, gt=0, description="relative count error at which the reward reaches 0")


@dataclass(frozen=True)
class PageCountDataset(RLDataset):
    """`num_batches` batches of `groups_per_batch` seeded documents."""

    settings: PageCountSettings
    renderer: Renderer
    num_batches: int
    groups_per_batch: int
    group_size: int
    seed: int

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        rng = random.Random(f"page_count/{self.seed}/{index}")
        s = self.settings
        return [
            PageCountGroupBuilder(
                make_document(rng, s.num_pages, s.page_words, s.target_rate),
                self.renderer,
                self.group_size,
                s.reward_tolerance,
            )
            for _ in range(self.groups_per_batch)
        ]

    def __len__(self) -> int:
        return self.num_batches


def build_page_count_task(settings: PageCountSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    return RLTask(
        train=PageCountDataset(
            settings, renderer, config.rl.num_batches, config.rl.groups_per_batch, config.rl.group_size, config.seed
        )
    )


ENV = EnvSpec("many-turn: count a word over a long document (numerics check)", PageCountSettings, build_page_count_task)
