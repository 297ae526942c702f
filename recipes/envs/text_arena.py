"""Two-player text games from the `textarena` package (tic-tac-toe by default; any two-player
game id, e.g. `ReverseTicTacToe-v0-train`), played by the policy in one of two ways:

- `opponent: self` (self-play): both seats are the policy. A group is one game, its two seats'
  episodes coordinated through the shared game (a seat's `step` waits for the other seat's move),
  rewarded zero-sum: +1 the winner, -1 the loser, 0 each for a draw. Both trajectories train.
- `opponent: random | model`: the policy takes one seat against a fixed opponent, a random player
  (uniform over the moves the game lists; the default) or another model (`env.opponent_model`, sampled only).
  A group is `rl.group_size` games from the same start and seat.

Self-play's mean reward is zero by construction, so learning is measured against a fixed
opponent: `env.eval_games` held-out games against `env.eval_opponent`, half in each seat,
logged as `eval/all/won` (the win rate), `eval/all/lost`, `eval/all/draw`.

Invalid moves (the game rejects them: a malformed or illegal move) are counted
(`invalid_moves`) and penalised: each costs the mover `env.invalid_move_penalty` on the turn it
was made, besides the game's own rule (textarena lets a player retry once, then forfeits it).

Each turn the policy sees one user message and answers with a move such as `[4]`: with
`env.prompt: game`, the game's own observation for its seat (the instructions, every move so far,
the board and the moves it lists; about 300 tokens in tic-tac-toe); with `env.prompt: board`
(tic-tac-toe only), the same turn read off that observation in a few lines: its mark, the board
(free squares numbered) and the legal moves, short enough for the tiny model to learn to read.
"""

from __future__ import annotations

import asyncio
import difflib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import Field

from kitchen import ConfigError, OtherModel
from kitchen.families.rl import EnvSettings, EnvSpec, RLSettings
from train_core.renderers.base import Renderer
from train_core.renderers.messages import Message
from train_core.rl.model_slot import ModelSlot
from train_core.rl.task import RLTask
from train_core.rl.types import Action, Env, EnvGroupBuilder, RLDataset, StepResult
from train_core.types import ModelInput, SamplingParams, StopCondition

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
PREFERENCE = (4, 0, 2, 6, 8, 1, 3, 5, 7)
"""Centre, corners, sides: the order a tic-tac-toe player without a win or a block takes squares in."""
MY_MARK = re.compile(r"you will be '([XO])'")
BOARD_ROW = re.compile(r"^ (\S) \| (\S) \| (\S) $", re.MULTILINE)
MOVE_LIST = re.compile(r"(?im)^.*\b(?:available|valid|legal) (?:moves|actions)\b[^:\n]*:(.*)$")
BRACKETED = re.compile(r"\[[^\[\]\n]+\]")


def textarena() -> Any:
    """The `textarena` package, imported on first use (it takes seconds to import)."""
    try:
        import textarena as ta
    except ImportError:
        raise ConfigError("env text_arena needs the textarena package: pip install 'kitchen[games]'") from None
    return ta


def check_game(game: str) -> None:
    """A registered textarena game id, else a ConfigError naming it."""
    registry = textarena().envs.registration.ENV_REGISTRY
    if game not in registry:
        close = difflib.get_close_matches(game, list(registry), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"env.game {game!r} is not a textarena game{hint}")


def listed_moves(observation: str) -> list[str]:
    """The moves a game's observation lists last (`Available Moves: '[0]', '[4]'`), or none."""
    lines = MOVE_LIST.findall(observation)
    return BRACKETED.findall(lines[-1]) if lines else []


class Arena:
    """One textarena game for two seats. A seat may move when the game's current player is it;
    `turn` wakes the seats after each move."""

    def __init__(self, game: str, seed: int) -> None:
        self.env = textarena().make(game)
        self.env.reset(num_players=2, seed=seed)
        self.turn = asyncio.Condition()
        self.done = False
        self.rewards: dict[int, float] = {}
        self.invalid = [0, 0]

    @property
    def current(self) -> int:
        return int(self.env.state.current_player_id)

    def observation(self, seat: int) -> str:
        player, observation = self.env.get_observation()
        if player != seat:
            raise RuntimeError(f"seat {seat} asked for an observation on seat {player}'s turn")
        return str(observation)

    async def play(self, seat: int, move: str) -> bool:
        """Make `seat`'s move and wake the seats; True when the game rejected it."""
        invalid = self.apply(seat, move)
        async with self.turn:
            self.turn.notify_all()
        return invalid

    def apply(self, seat: int, move: str) -> bool:
        """Make `seat`'s move; True when the game rejected it (the seat moves again, or forfeits)."""
        done, _ = self.env.step(move)
        invalid = False
        if done:
            rewards, info = self.env.close()
            self.rewards = {int(p): float(r) for p, r in rewards.items()}
            self.done = True
            invalid = bool(info.get(seat, {}).get("invalid_move"))
        else:
            invalid = self.current == seat
        self.invalid[seat] += int(invalid)
        return invalid

    async def wait_for_turn(self, seat: int) -> None:
        async with self.turn:
            await self.turn.wait_for(lambda: self.done or self.current == seat)


class Player(Protocol):
    """A fixed opponent: a move for an observation."""

    async def move(self, observation: str) -> str: ...


@dataclass
class RandomPlayer:
    """Uniform over the moves the observation lists."""

    rng: random.Random

    async def move(self, observation: str) -> str:
        moves = listed_moves(observation)
        if not moves:
            raise ConfigError(
                "the random player needs a game whose observations list their moves ('Available Moves: [0], ...')"
            )
        return self.rng.choice(moves)


Show = Callable[[str], str]
"""A seat's prompt text from the game's observation: `game_prompt` or `board_prompt`."""


@dataclass
class ModelPlayer:
    """Another model, sampled on the same prompt the policy sees."""

    slot: ModelSlot
    renderer: Renderer
    params: SamplingParams
    show: Show

    async def move(self, observation: str) -> str:
        prompt = self.renderer.build_generation_prompt([Message(role="user", content=self.show(observation))])
        sampled = await self.slot.sample(prompt, self.params, self.renderer.get_stop_sequences())
        message, _ = self.renderer.parse_response(sampled.tokens)
        return str(message["content"])


class SeatEnv(Env):
    """The policy's seat in one game: against a fixed `opponent`, or (None) against the policy in
    the other seat's env, which shares the arena."""

    def __init__(
        self, arena: Arena, seat: int, renderer: Renderer, show: Show, penalty: float, opponent: Player | None = None
    ) -> None:
        self.arena, self.seat, self.renderer, self.show = arena, seat, renderer, show
        self.penalty, self.opponent = penalty, opponent

    async def _until_my_turn(self) -> None:
        if self.opponent is None:
            await self.arena.wait_for_turn(self.seat)
            return
        while not self.arena.done and self.arena.current != self.seat:
            other = self.arena.current
            await self.arena.play(other, await self.opponent.move(self.arena.observation(other)))

    def _prompt(self) -> ModelInput:
        observation = self.show(self.arena.observation(self.seat))
        return self.renderer.build_generation_prompt([Message(role="user", content=observation)])

    async def initial_observation(self) -> tuple[ModelInput, StopCondition]:
        await self._until_my_turn()
        if self.arena.done:
            # The other seat forfeited before this one moved: the episode still needs one action,
            # which `step` leaves out of training (parse_ok False) and rewards 0.
            prompt = [Message(role="user", content="The game is over: your opponent forfeited.")]
            return self.renderer.build_generation_prompt(prompt), self.renderer.get_stop_sequences()
        return self._prompt(), self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        message, parsed = self.renderer.parse_response(action)
        if self.arena.done:
            metrics = {"invalid_moves": 0.0, "won": 0.0, "lost": 0.0, "draw": 0.0, "forfeit_before_move": 1.0}
            return StepResult(0.0, True, ModelInput.empty(), self.renderer.get_stop_sequences(), metrics, False)
        invalid = await self.arena.play(self.seat, str(message["content"]))
        if not invalid:
            await self._until_my_turn()
        reward = -self.penalty if invalid else 0.0
        stop = self.renderer.get_stop_sequences()
        if not self.arena.done:
            return StepResult(reward, False, self._prompt(), stop, {"invalid_move": float(invalid)}, parsed)
        outcome = self.arena.rewards.get(self.seat, 0.0)
        metrics = {
            "invalid_move": float(invalid),
            "invalid_moves": float(self.arena.invalid[self.seat]),
            "won": float(outcome > 0),
            "lost": float(outcome < 0),
            "draw": float(outcome == 0),
            "seat": float(self.seat),
        }
        return StepResult(reward + outcome, True, ModelInput.empty(), stop, metrics, parsed)


@dataclass(frozen=True)
class SelfPlayGame(EnvGroupBuilder):
    """One game, both seats the policy: a group of two zero-sum episodes."""

    game: str
    seed: int
    renderer: Renderer
    show: Show
    penalty: float
    tag: str

    async def make_envs(self) -> list[SeatEnv]:
        arena = Arena(self.game, self.seed)
        return [SeatEnv(arena, seat, self.renderer, self.show, self.penalty) for seat in (0, 1)]

    def logging_tags(self) -> list[str]:
        return [self.tag]


@dataclass(frozen=True)
class OpponentGames(EnvGroupBuilder):
    """`num_games` games from the same start, the policy in `seat` against a fixed opponent."""

    game: str
    seed: int
    seat: int
    num_games: int
    renderer: Renderer
    show: Show
    penalty: float
    opponent: Callable[[int], Player]
    """A fresh opponent per game, from that game's seed."""
    tag: str

    async def make_envs(self) -> list[SeatEnv]:
        return [
            SeatEnv(
                Arena(self.game, self.seed),
                self.seat,
                self.renderer,
                self.show,
                self.penalty,
                self.opponent(self.seed * 1000 + i),
            )
            for i in range(self.num_games)
        ]

    def logging_tags(self) -> list[str]:
        return [self.tag]


@dataclass(frozen=True)
class ArenaDataset(RLDataset):
    """Each batch: `groups_per_batch` games in self-play, or groups of games against the opponent
    in alternating seats; game seeds drawn from the run's seed and the batch index."""

    make_group: Callable[[int, int], EnvGroupBuilder]
    """(game seed, seat) -> one group."""
    num_batches: int
    groups_per_batch: int
    seed: int

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        rng = random.Random(f"text_arena/{self.seed}/{index}")
        return [self.make_group(rng.randrange(2**31), (index + g) % 2) for g in range(self.groups_per_batch)]

    def __len__(self) -> int:
        return self.num_batches


@dataclass(frozen=True)
class RandomTeacher:
    """Warm-start demonstrations: every move of games between two random players, each as the
    seat's prompt and the move (the answer format and legal moves; no strategy)."""

    game: str
    show: Show

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        out: list[list[Message]] = []
        while len(out) < count:
            arena = Arena(self.game, rng.randrange(2**31))
            while not arena.done and len(out) < count:
                seat = arena.current
                observation = arena.observation(seat)
                moves = listed_moves(observation)
                if not moves:
                    raise ConfigError(
                        f"warm start: game {self.game!r} lists no moves to demonstrate; set warm_start.steps=0"
                    )
                move = rng.choice(moves)
                out.append(
                    [Message(role="user", content=self.show(observation)), Message(role="assistant", content=move)]
                )
                arena.apply(seat, move)
        return out


def read_board(observation: str, refusal: str) -> tuple[str, list[str]]:
    """The seat's mark and the nine cells of the last tic-tac-toe board a textarena observation
    draws (a free cell is its number); else a ConfigError saying `refusal`."""
    mark = MY_MARK.search(observation)
    rows = BOARD_ROW.findall(observation)[-3:]
    if mark is None or len(rows) != 3:
        raise ConfigError(refusal)
    return mark.group(1), [cell for row in rows for cell in row]


def board_prompt(observation: str) -> str:
    """The turn in a few lines: the seat's mark, the board (free squares numbered) and the free
    squares as moves, e.g. `You are X.` / `X12` / `3O5` / `678` / `Legal moves: [1] [2] [3] [5] [6] [7] [8]`."""
    mark, cells = read_board(observation, "env.prompt=board reads tic-tac-toe boards only; set env.prompt=game")
    rows = "\n".join("".join(cells[row : row + 3]) for row in (0, 3, 6))
    free = " ".join(f"[{cell}]" for cell in cells if cell.isdigit())
    return f"You are {mark}.\n{rows}\nLegal moves: {free}"


def game_prompt(observation: str) -> str:
    """The game's own observation, as it is."""
    return observation


def good_tictactoe_move(observation: str) -> str:
    """A sound tic-tac-toe move for the seat whose observation this is: complete a line of its
    own, else block the opponent's, else the first free square in `PREFERENCE`. Read from the text
    (the last board drawn and the seat's mark), so it is what the policy itself could see."""
    mine, cells = read_board(observation, "the scripted teacher reads tic-tac-toe boards only; set env.teacher=random")
    free = {i for i, cell in enumerate(cells) if cell.isdigit()}
    for owner in (mine, "O" if mine == "X" else "X"):  # win first, then block
        for line in LINES:
            open_squares = [i for i in line if i in free]
            if len(open_squares) == 1 and sum(cells[i] == owner for i in line) == 2:
                return f"[{open_squares[0]}]"
    return f"[{next(i for i in PREFERENCE if i in free)}]"


@dataclass(frozen=True)
class ScriptedTeacher:
    """Warm-start demonstrations of strategy: every move of games in which a seat plays
    `good_tictactoe_move` against a random player (seats alternate), as the seat's prompt and that
    move. Only the scripted seat's moves are demonstrated; the random seat gives it varied boards."""

    game: str
    show: Show

    def __call__(self, rng: random.Random, count: int) -> list[list[Message]]:
        out: list[list[Message]] = []
        while len(out) < count:
            arena, good_seat = Arena(self.game, rng.randrange(2**31)), rng.randrange(2)
            while not arena.done and len(out) < count:
                seat = arena.current
                observation = arena.observation(seat)
                if seat == good_seat:
                    move = good_tictactoe_move(observation)
                    prompt = Message(role="user", content=self.show(observation))
                    out.append([prompt, Message(role="assistant", content=move)])
                else:
                    move = rng.choice(listed_moves(observation))
                arena.apply(seat, move)
        return out


class TextArenaSettings(EnvSettings):
    name: Literal["text_arena"] = Field("text_arena", description="two-player textarena games")
    game: str = Field("TicTacToe-v0-train", description="a two-player textarena game id")
    opponent: Literal["self", "random", "model"] = Field(
        "random", description="self-play (both seats the policy), or a fixed random player / opponent_model"
    )
    opponent_model: OtherModel = Field(
        default_factory=OtherModel, description="opponent 'model': the model it samples; default: model_name"
    )
    opponent_temperature: float = Field(1.0, ge=0, description="opponent 'model': its sampling temperature")
    eval_opponent: Literal["random", "model"] = Field("random", description="the fixed opponent of the held-out games")
    eval_games: int = Field(128, ge=2, description="held-out games against eval_opponent, half in each seat")
    invalid_move_penalty: float = Field(1.0, ge=0, description="reward subtracted for each invalid move")
    prompt: Literal["board", "game"] = Field(
        "board",
        description="what the policy sees each turn: 'board', its mark, the board and the free squares in a few "
        "lines (tic-tac-toe games only), or 'game', the game's own observation (any game)",
    )
    teacher: Literal["scripted", "random"] = Field(
        "scripted",
        description="warm-start demonstrations: 'scripted' tic-tac-toe moves (win, block, centre, corner; "
        "tic-tac-toe games only) or 'random' legal moves (any game that lists its moves)",
    )


def build_task(settings: TextArenaSettings, config: RLSettings, renderer: Renderer) -> RLTask:
    check_settings(settings, frozenset())
    rl, game, penalty, tag = config.rl, settings.game, settings.invalid_move_penalty, "text_arena"
    show = board_prompt if settings.prompt == "board" else game_prompt
    needs_model = "model" in (settings.opponent, settings.eval_opponent)
    slot = ModelSlot("opponent", settings.opponent_model.model_name, settings.opponent_model.checkpoint)
    params = SamplingParams(max_tokens=config.sampling.max_tokens, temperature=settings.opponent_temperature)

    def player(kind: str) -> Callable[[int], Player]:
        if kind == "model":
            return lambda seed: ModelPlayer(slot, renderer, params, show)
        return lambda seed: RandomPlayer(random.Random(seed))

    if settings.opponent == "self":
        if rl.group_size != 2:
            raise ConfigError("env.opponent=self: a group is one game's two seats; set rl.group_size=2")

        def make(seed: int, seat: int) -> EnvGroupBuilder:
            return SelfPlayGame(game, seed, renderer, show, penalty, tag)
    else:
        against = player(settings.opponent)

        def make(seed: int, seat: int) -> EnvGroupBuilder:
            return OpponentGames(game, seed, seat, rl.group_size, renderer, show, penalty, against, tag)

    eval_rng = random.Random(f"text_arena/eval/{config.seed}")
    against_eval = player(settings.eval_opponent)
    held_out = [
        OpponentGames(game, eval_rng.randrange(2**31), i % 2, 1, renderer, show, penalty, against_eval, tag)
        for i in range(settings.eval_games)
    ]
    return RLTask(
        train=ArenaDataset(make, rl.num_batches, rl.groups_per_batch, config.seed),
        eval_builders=held_out,
        demonstrations=ScriptedTeacher(game, show) if settings.teacher == "scripted" else RandomTeacher(game, show),
        models=[slot] if needs_model else [],
    )


def check_settings(settings: TextArenaSettings, roles: frozenset[str]) -> None:
    check_game(settings.game)
    if settings.teacher == "scripted" and not settings.game.startswith("TicTacToe-"):
        raise ConfigError(f"env.teacher=scripted plays tic-tac-toe only, not {settings.game!r}; set env.teacher=random")
    if settings.prompt == "board" and not settings.game.startswith("TicTacToe-"):
        raise ConfigError(f"env.prompt=board draws tic-tac-toe boards only, not {settings.game!r}; set env.prompt=game")


ENV = EnvSpec(
    "two-player textarena games: self-play or a fixed opponent", TextArenaSettings, build_task, check_settings
)
