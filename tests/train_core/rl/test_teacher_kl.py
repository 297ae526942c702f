"""The teacher's reverse KL in the advantages (on-policy distillation: no baseline, only
action tokens, optional discounting; and the prompt-only data sets."""

from __future__ import annotations

import asyncio

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings
from rl_test_factories import trajectory, transition

from tests.rl_workflow.envs_common import renderer
from train_core.distillation import (
    CompositeDataset,
    PromptDataset,
    PromptGroupBuilder,
    PromptOnlyEnv,
    incorporate_teacher_kl,
)
from train_core.renderers.messages import Message
from train_core.rl.data_processing import trajectory_to_data
from train_core.rl.types import EnvGroupBuilder
from train_core.types import Datum


def datums(logprobs: list[list[float]], advantage: float = 0.5) -> list[Datum]:
    """One datum per entry: a 2-token observation and the entry's action tokens."""
    out = []
    for index, lps in enumerate(logprobs):
        action = [30 + k for k in range(len(lps))]
        out += trajectory_to_data(trajectory(transition([10 + index, 11], action, logprobs=lps)), advantage)
    return out


def column(data: list[Datum], key: str) -> list[list[float]]:
    return [[float(x) for x in d.loss_fn_inputs[key].tolist()] for d in data]


def test_hand_worked_penalty() -> None:
    data = datums([[-1.0, -2.0]])  # targets: [obs, a0, a1] -> sampled [0, -1, -2], mask [0, 1, 1]
    teacher = [torch.tensor([-5.0, -0.5, -2.5])]
    new_data, kl = incorporate_teacher_kl(data, teacher, coef=0.2)
    # rkl = (sampled - teacher) * mask = [0, -0.5, 0.5]; advantages += -0.2 * rkl; no baseline.
    assert column(new_data, "advantages") == [pytest.approx([0.0, 0.6, 0.4])]
    assert kl.kl_sum_D == [pytest.approx(0.0)] and kl.tokens_D == [2.0] and kl.mean() == pytest.approx(0.0)
    discounted, _ = incorporate_teacher_kl(data, teacher, coef=0.2, discount=0.5)
    # penalty [0, 0.1, -0.1] -> future sums [0, 0.05, -0.1] masked -> advantages [0, 0.55, 0.4]
    assert column(discounted, "advantages") == [pytest.approx([0.0, 0.55, 0.4])]


logprob_lists = st.lists(st.lists(st.floats(-8, 0), min_size=1, max_size=4), min_size=1, max_size=3)


@settings(max_examples=40, deadline=None)
@given(logprob_lists, st.floats(0, 2), st.floats(0, 0.99))
def test_a_teacher_that_agrees_changes_nothing(lps: list[list[float]], coef: float, discount: float) -> None:
    data = datums(lps)
    same = [d.loss_fn_inputs["logprobs"].to_torch() for d in data]
    new_data, kl = incorporate_teacher_kl(data, same, coef, discount)
    assert column(new_data, "advantages") == column(data, "advantages")
    assert kl.mean() == 0.0


@settings(max_examples=40, deadline=None)
@given(logprob_lists, st.lists(st.floats(-8, 0), min_size=12, max_size=12), st.floats(0.01, 2), st.floats(0, 0.99))
def test_the_penalty_touches_only_action_tokens_and_scales_with_coef(
    lps: list[list[float]], teacher_values: list[float], coef: float, discount: float
) -> None:
    data = datums(lps)
    teacher = [torch.tensor(teacher_values[: d.model_input.length]) for d in data]
    new_data, kl = incorporate_teacher_kl(data, teacher, coef, discount)
    doubled, _ = incorporate_teacher_kl(data, teacher, 2 * coef, discount)

    def flat(rows: list[Datum], key: str) -> torch.Tensor:
        return torch.cat([d.loss_fn_inputs[key].to_torch().float() for d in rows])

    before, after, twice = flat(data, "advantages"), flat(new_data, "advantages"), flat(doubled, "advantages")
    mask = flat(data, "mask")
    assert torch.equal(after[mask == 0], before[mask == 0]) and torch.equal(twice[mask == 0], before[mask == 0])
    assert torch.allclose(twice - before, 2 * (after - before), atol=1e-5)
    reverse_kl = (flat(data, "logprobs") - torch.cat(teacher)) * mask
    assert kl.mean() * sum(kl.tokens_D) == pytest.approx(float(reverse_kl.sum()), abs=1e-4)
    if discount == 0:
        assert torch.allclose(after - before, -coef * reverse_kl, atol=1e-5)


def test_prompt_only_env_rewards_nothing_and_ends() -> None:
    env = PromptOnlyEnv([{"role": "user", "content": "Hi"}], renderer())
    ob, stop = asyncio.run(env.initial_observation())
    assert ob.length > 0 and stop
    result = asyncio.run(env.step([1, 2, 3]))
    assert result.reward == 0.0 and result.episode_done


def prompt_of(builder: EnvGroupBuilder) -> tuple[Message, ...]:
    assert isinstance(builder, PromptGroupBuilder)
    return builder.prompt


def test_prompt_datasets_are_reproducible_and_the_composite_gives_each_its_share() -> None:
    prompts: list[list[Message]] = [[{"role": "user", "content": f"q{i}"}] for i in range(10)]
    a = PromptDataset("a", prompts, renderer(), groups_per_batch=3, group_size=2, seed=0)
    b = PromptDataset("b", prompts[:4], renderer(), groups_per_batch=1, group_size=2, seed=0)
    assert [prompt_of(g) for g in a.get_batch(5)] == [prompt_of(g) for g in a.get_batch(5)]
    assert len(a) == 3 and len(b) == 4
    composite = CompositeDataset([a, b])
    assert len(composite) == 4
    batch = composite.get_batch(3)
    assert [g.logging_tags() for g in batch] == [["a"]] * 3 + [["b"]]
    assert prompt_of(batch[0]) == prompt_of(a.get_batch(0)[0])  # a is cycled on its own: batch 3 % 3 == 0
    with pytest.raises(ValueError, match="no prompts"):
        PromptDataset("empty", [], renderer(), 1, 1, 0)
