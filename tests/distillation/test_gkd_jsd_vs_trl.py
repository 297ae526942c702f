"""The generalized JSD of GKD against TRL 1.16's own `GKDTrainer.generalized_jsd_loss` (a static
method) on random float64 logits with masked labels: value and gradient with respect to the
student's logits, over seeds, beta in {0, 0.5, 1, a random one} and two temperatures. TRL is in
the test extra (`trl==1.16.*`): this module imports it."""

from __future__ import annotations

import random

import pytest
import torch
from trl.experimental.gkd.gkd_trainer import GKDTrainer

from train_core.gkd import generalized_jsd

pytestmark = pytest.mark.slow  # importing TRL takes 10-50 s on 2 cores

SEEDS = range(5)


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Student and teacher logits [B, T, V] (float64, spread out) and labels with -100 holes."""
    generator = torch.Generator().manual_seed(seed)
    student = torch.randn(3, 7, 11, generator=generator, dtype=torch.float64) * 3
    teacher = torch.randn(3, 7, 11, generator=generator, dtype=torch.float64) * 3
    labels = torch.randint(0, 11, (3, 7), generator=generator)
    labels[torch.rand(3, 7, generator=generator) < 0.4] = -100
    labels[0, :] = -100  # a whole sequence masked
    return student, teacher, labels


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, None])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_value_and_gradient_equal_trl(seed: int, beta: float | None, temperature: float) -> None:
    beta = random.Random(seed).uniform(0.05, 0.95) if beta is None else beta
    student, teacher, labels = batch(seed)
    theirs_in = student.clone().requires_grad_(True)
    ours_in = student.clone().requires_grad_(True)
    theirs = GKDTrainer.generalized_jsd_loss(theirs_in, teacher, labels, beta=beta, temperature=temperature)
    ours = generalized_jsd(ours_in, teacher, labels != -100, beta, temperature)
    theirs.backward()
    ours.backward()
    assert theirs_in.grad is not None and ours_in.grad is not None
    assert float(theirs.detach()) > 0
    assert abs(float(ours.detach()) - float(theirs.detach())) < 1e-12
    assert float((ours_in.grad - theirs_in.grad).abs().max()) < 1e-12


def test_an_empty_mask_is_zero_with_a_gradient_path_as_in_trl() -> None:
    student, teacher, labels = batch(0)
    labels[:] = -100
    ours_in = student.clone().requires_grad_(True)
    ours = generalized_jsd(ours_in, teacher, labels != -100, 0.5)
    theirs = GKDTrainer.generalized_jsd_loss(student, teacher, labels, beta=0.5)
    ours.backward()
    assert float(ours.detach()) == float(theirs) == 0.0
    assert ours_in.grad is not None and float(ours_in.grad.abs().max()) == 0.0
