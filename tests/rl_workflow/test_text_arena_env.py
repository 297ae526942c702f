"""Two-player textarena games: listed moves, self-play coordination and zero-sum rewards, invalid
moves counted and penalised, fixed opponents (random, another model), the warm start's games,
and the recipe on the noop backend."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import pytest

from kitchen import ConfigError, StageFailure
from kitchen.testing import RunResult
from recipes.envs.text_arena import (
    Arena,
    OpponentGames,
    RandomPlayer,
    RandomTeacher,
    ScriptedTeacher,
    SelfPlayGame,
    board_prompt,
    check_game,
    game_prompt,
    good_tictactoe_move,
    listed_moves,
)
from tests.rl_workflow.envs_common import renderer, reply_tokens
from train_core.rl.rollouts import do_group_rollout
from train_core.rl.types import TrajectoryGroup
from train_core.types import ModelInput, StopCondition, TokensWithLogprobs

pytest.importorskip("textarena")  # the `games` extra; the test extra installs it

R = renderer()
GAME = "TicTacToe-v0-train"


def scripted(
    choose: Callable[[str, list[str]], str],
) -> Callable[[ModelInput, StopCondition], Awaitable[TokensWithLogprobs]]:
    """A policy that reads the observation's text and answers `choose(observation, listed moves)`."""

    async def policy(ob: ModelInput, stop: StopCondition) -> TokensWithLogprobs:
        text = str(R.tokenizer.decode(ob.to_ints()))
        tokens = reply_tokens(R, choose(text, listed_moves(text)))
        return TokensWithLogprobs(tokens, [0.0] * len(tokens))

    return policy


def lowest(text: str, moves: list[str]) -> str:
    return moves[0]


def roll(builder: object, policy: object) -> TrajectoryGroup:
    return asyncio.run(do_group_rollout(builder, policy))  # type: ignore[arg-type]


def test_moves_are_read_from_the_last_listing() -> None:
    text = "Available Moves: '[0]', '[1]'\nPlayer 0 placed...\nAvailable Moves: '[1]', '[5]', '[8]'"
    assert listed_moves(text) == ["[1]", "[5]", "[8]"]
    assert listed_moves("no moves here") == []


def test_self_play_coordinates_both_seats_and_is_zero_sum() -> None:
    # Both seats take the lowest free square: seat 0 gets 0, 2, 4, 6 and wins on the 2-4-6 diagonal.
    group = roll(SelfPlayGame(GAME, 0, R, game_prompt, 1.0, "t"), scripted(lowest))
    rewards = group.get_total_rewards()
    assert rewards == [1.0, -1.0]
    seat0, seat1 = group.trajectories_G
    assert len(seat0.transitions) == 4 and len(seat1.transitions) == 3
    assert seat0.transitions[-1].metrics["won"] == 1.0 and seat1.transitions[-1].metrics["lost"] == 1.0
    assert "'[0]'" not in str(R.tokenizer.decode(seat1.transitions[0].ob.to_ints())).split("Available Moves")[-1]


def test_an_invalid_move_is_counted_penalised_and_retried() -> None:
    calls: dict[str, int] = {}

    def sloppy(text: str, moves: list[str]) -> str:
        seat = "0" if "Player 0" in text.split("\n")[0] else "1"
        calls[seat] = calls.get(seat, 0) + 1
        return "[42]" if seat == "1" and calls[seat] == 1 else moves[0]

    group = roll(SelfPlayGame(GAME, 0, R, game_prompt, 0.5, "t"), scripted(sloppy))
    seat1 = group.trajectories_G[1]
    assert seat1.transitions[0].reward == -0.5 and seat1.transitions[0].metrics["invalid_move"] == 1.0
    assert seat1.transitions[0].parse_ok  # an illegal move is a reply like any other: trained, with its penalty
    assert seat1.transitions[-1].metrics["invalid_moves"] == 1.0
    assert group.get_total_rewards()[1] == pytest.approx(-1.5)


def test_two_invalid_moves_forfeit_the_game() -> None:
    def hopeless(text: str, moves: list[str]) -> str:
        return "[42]" if "You are Player 1" in text else moves[0]

    group = roll(SelfPlayGame(GAME, 0, R, game_prompt, 0.0, "t"), scripted(hopeless))
    assert group.get_total_rewards() == [1.0, -1.0]
    assert group.trajectories_G[1].transitions[-1].metrics["invalid_moves"] == 2.0


@pytest.mark.parametrize("seat", [0, 1])
def test_a_random_opponent_plays_only_legal_moves(seat: int) -> None:
    group = roll(
        OpponentGames(GAME, 3, seat, 6, R, game_prompt, 1.0, lambda s: RandomPlayer(random.Random(s)), "t"),
        scripted(lowest),
    )
    for trajectory in group.trajectories_G:
        assert trajectory.transitions[-1].episode_done
        assert trajectory.transitions[-1].metrics["seat"] == seat
        assert trajectory.transitions[-1].metrics["invalid_moves"] == 0.0
        first = R.tokenizer.decode(trajectory.transitions[0].ob.to_ints())
        assert ("placed their symbol" in first) == (seat == 1)  # the opponent opened when the policy is seat 1


def test_the_board_prompt_reads_the_mark_the_last_board_and_the_legal_moves() -> None:
    arena = Arena(GAME, 0)
    arena.apply(0, "[4]")
    arena.apply(1, "[0]")
    observation = arena.observation(0)
    assert "Player 1 placed their symbol (X) in cell 0" in observation  # the game's own text, about 300 tokens
    prompt = board_prompt(observation)
    assert prompt == "You are O.\nX12\n3O5\n678\nLegal moves: [1] [2] [3] [5] [6] [7] [8]"
    assert listed_moves(prompt) == listed_moves(observation)  # the random player and the policy agree on the moves


def test_the_board_prompt_refuses_other_games() -> None:
    with pytest.raises(ConfigError, match=r"env\.prompt=game"):
        board_prompt("You are Player 0 in Nim.\nAvailable Moves: '[1]', '[2]'")


def test_games_against_an_opponent_show_the_policy_the_board_prompt() -> None:
    group = roll(
        OpponentGames(GAME, 3, 1, 2, R, board_prompt, 1.0, lambda s: RandomPlayer(random.Random(s)), "t"),
        scripted(lowest),
    )
    for trajectory in group.trajectories_G:
        for transition in trajectory.transitions:
            text = str(R.tokenizer.decode(transition.ob.to_ints()))
            assert "Current Board" not in text and "\nLegal moves: [" in text
        assert trajectory.transitions[-1].metrics["invalid_moves"] == 0.0  # the lowest listed move is legal


def test_the_teacher_demonstrates_legal_moves() -> None:
    demos = RandomTeacher(GAME, game_prompt)(random.Random(0), 30)
    assert len(demos) == 30
    for user, move in demos:
        assert move["content"] in listed_moves(user["content"])


def board(rows: tuple[tuple[str, str, str], ...], mark: str = "O") -> str:
    """An observation as textarena draws it: the seat's mark, then the board (free squares numbered)."""
    drawn = "\n---+---+---\n".join(" " + " | ".join(row) + " " for row in rows)
    return f"As Player 0, you will be '{mark}', while ...\n\nCurrent Board:\n\n{drawn}\n\nAvailable Moves: ..."


@pytest.mark.parametrize(
    ("rows", "mark", "move"),
    [
        ((("0", "1", "2"), ("3", "4", "5"), ("6", "7", "8")), "O", "[4]"),  # empty board: the centre
        ((("O", "X", "2"), ("O", "X", "5"), ("6", "7", "8")), "O", "[6]"),  # a win beats the block at 7
        ((("X", "X", "2"), ("O", "O", "5"), ("6", "7", "8")), "X", "[2]"),  # X too wins before it blocks
        ((("O", "1", "O"), ("3", "X", "5"), ("6", "7", "8")), "X", "[1]"),  # X blocks O's top row
    ],
)
def test_the_scripted_move_wins_then_blocks_then_takes_the_centre(
    rows: tuple[tuple[str, str, str], ...], mark: str, move: str
) -> None:
    assert good_tictactoe_move(board(rows, mark)) == move


def test_the_scripted_move_reads_the_last_board_drawn() -> None:
    old = board((("0", "1", "2"), ("3", "4", "5"), ("6", "7", "8")))
    new = board((("X", "1", "2"), ("3", "O", "5"), ("6", "7", "X")))
    assert good_tictactoe_move(old + "\n" + new) == "[2]"  # centre taken, no threat: the first free corner


def test_the_scripted_move_refuses_other_boards() -> None:
    with pytest.raises(ConfigError, match=r"env\.teacher=random"):
        good_tictactoe_move("Available Moves: '[0]'")


def test_the_scripted_teacher_demonstrates_its_moves_and_wins() -> None:
    demos = ScriptedTeacher(GAME, game_prompt)(random.Random(0), 200)
    assert len(demos) == 200
    for user, move in demos:
        assert move["content"] in listed_moves(user["content"])
        assert move["content"] == good_tictactoe_move(user["content"])
    centre_free = [move["content"] for user, move in demos if "[4]" in listed_moves(user["content"])]
    assert centre_free.count("[4]") > len(centre_free) / 2  # mostly the centre when it is free


def test_the_scripted_teacher_shows_its_moves_on_the_board_prompt() -> None:
    shown = ScriptedTeacher(GAME, board_prompt)(random.Random(0), 40)
    raw = ScriptedTeacher(GAME, game_prompt)(random.Random(0), 40)
    assert [move for _, move in shown] == [move for _, move in raw]  # the same games and moves
    assert [user["content"] for user, _ in shown] == [board_prompt(user["content"]) for user, _ in raw]


def test_a_board_prompt_for_another_game_is_refused(kitchen_run: Callable[..., RunResult]) -> None:
    with pytest.raises(ConfigError, match=r"env\.prompt=board.*ReverseTicTacToe"):
        kitchen_run(
            "text_arena", *SHORT, "env.game=ReverseTicTacToe-v0-train", "env.teacher=random", replies=first_listed
        )


def test_a_scripted_teacher_for_another_game_is_refused(kitchen_run: Callable[..., RunResult]) -> None:
    with pytest.raises(ConfigError, match=r"env\.teacher=scripted.*ReverseTicTacToe"):
        kitchen_run("text_arena", *SHORT, "env.game=ReverseTicTacToe-v0-train", replies=first_listed)


def test_an_unknown_game_is_refused_with_near_names() -> None:
    with pytest.raises(ConfigError, match=r"'TicTacToo-v0'.*TicTacToe"):
        check_game("TicTacToo-v0")


def first_listed(prompt: str) -> str:
    moves = listed_moves(prompt)
    return moves[0] if moves else "[0]"


SHORT = ("rl.num_batches=2", "warm_start.steps=2", "eval.every=1", "rl.groups_per_batch=4", "env.eval_games=4")


def opened_base_models(run: RunResult) -> list[str]:
    calls = run.backend.calls  # type: ignore[attr-defined]
    return [c.summary["base_model"] for c in calls if c.method == "create_sampling_client" and c.summary["base_model"]]


def test_self_play_runs_on_noop(kitchen_run: Callable[..., RunResult]) -> None:
    run = kitchen_run("text_arena", *SHORT, "env.opponent=self", "rl.group_size=2", replies=first_listed)
    assert opened_base_models(run) == []
    row = run.metrics[-1]
    assert row["env/all/won"] == 0.5 and row["env/all/lost"] == 0.5  # seat 0 wins every self-play game
    assert row["env/all/reward/total"] == 0.0 and row["env/all/invalid_moves"] == 0.0
    assert 0.0 <= row["eval/all/won"] <= 1.0 and row["eval/all/total_episodes"] == 4


def test_a_model_opponent_is_opened_and_sampled(kitchen_run: Callable[..., RunResult]) -> None:
    run = kitchen_run(
        "text_arena", *SHORT, "env.opponent=model", "env.eval_opponent=model", "rl.group_size=3", replies=first_listed
    )
    row = run.metrics[-1]
    # The scripted policy and opponent both take the lowest square: seat 0 always wins.
    assert row["eval/all/won"] == 0.5 and row["env/all/won"] == 0.5
    assert opened_base_models(run) == ["tiny"]  # the opponent: the run's base model, untrained


def test_self_play_needs_groups_of_two(kitchen_run: Callable[..., RunResult]) -> None:
    with pytest.raises(StageFailure, match=r"set rl\.group_size=2"):
        kitchen_run("text_arena", *SHORT, "env.opponent=self", "rl.group_size=4")


def test_the_defaults_play_the_random_player_on_the_board_prompt(kitchen_run: Callable[..., RunResult]) -> None:
    prompts: list[str] = []

    def record(prompt: str) -> str:
        prompts.append(prompt)
        return first_listed(prompt)

    run = kitchen_run("text_arena", *SHORT, replies=record)
    assert prompts and all("Current Board" not in p and "Legal moves: [" in p for p in prompts)
    row = run.metrics[-1]
    assert row["env/all/invalid_moves"] == 0.0 and row["env/all/total_episodes"] == 4 * 8  # groups of 8 games
    assert row["env/all/won"] + row["env/all/lost"] + row["env/all/draw"] == pytest.approx(1.0)
