"""The preference losses: values at known points, gradient directions (hypothesis), and each one
through `forward_backward_custom` on the noop backend's DPO workflow."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kitchen.engine.config.loading import load_config
from kitchen.engine.errors import ConfigError
from kitchen.engine.recipe import get_recipe
from kitchen.engine.runs.metrics import read_metrics
from tests.preference_workflow.dpo_runs import run_dpo_recipe
from train_core.preference.losses import PREFERENCE_LOSSES, PairBatch, PreferenceLossParams, preference_loss

logprob = st.floats(-40.0, -0.5)
length = st.integers(1, 30)


def batch(lc: float, lr: float, rc: float, rr: float, nc: int = 5, nr: int = 5) -> PairBatch:
    t = lambda v: torch.tensor([float(v)], dtype=torch.float64, requires_grad=True)  # noqa: E731
    return PairBatch(t(lc), t(lr), t(rc), t(rr), t(nc).detach(), t(nr).detach())


def test_values_when_the_policy_equals_the_reference() -> None:
    p = PreferenceLossParams(beta=0.5, label_smoothing=0.2)
    b = batch(-3.0, -4.0, -3.0, -4.0)
    assert math.isclose(preference_loss("sigmoid", b, p)[0].item(), math.log(2))
    assert math.isclose(preference_loss("ipo", b, p)[0].item(), (1 / (2 * 0.5)) ** 2)
    assert math.isclose(preference_loss("hinge", b, p)[0].item(), 1.0)
    assert math.isclose(preference_loss("cdpo", b, p)[0].item(), math.log(2))
    assert math.isclose(preference_loss("robust", b, p)[0].item(), math.log(2))


def test_cdpo_robust_and_ipo_by_hand() -> None:
    """cDPO smooths the labels, rDPO subtracts the flipped term and rescales, IPO averages per token."""
    p = PreferenceLossParams(beta=0.5, label_smoothing=0.2)
    b = batch(-2.0, -9.0, -3.0, -6.0, nc=2, nr=4)  # h = 1 - (-3) = 4, beta h = 2
    clean, flipped = -math.log(1 / (1 + math.exp(-2.0))), -math.log(1 / (1 + math.exp(2.0)))
    assert math.isclose(preference_loss("cdpo", b, p)[0].item(), 0.8 * clean + 0.2 * flipped, rel_tol=1e-12)
    assert math.isclose(preference_loss("robust", b, p)[0].item(), (0.8 * clean - 0.2 * flipped) / 0.6, rel_tol=1e-12)
    h_avg = 1.0 / 2 - (-3.0) / 4
    assert math.isclose(preference_loss("ipo", b, p)[0].item(), (h_avg - 1.0) ** 2, rel_tol=1e-12)


def test_simpo_and_orpo_by_hand() -> None:
    p = PreferenceLossParams(beta=2.0, simpo_gamma=0.5, orpo_lambda=0.1)
    b = batch(-2.0, -6.0, 0.0, 0.0, nc=2, nr=3)
    simpo = -math.log(1 / (1 + math.exp(-(2.0 * -1.0 - 2.0 * -2.0 - 0.5))))
    assert math.isclose(preference_loss("simpo", b, p)[0].item(), simpo, rel_tol=1e-9)

    def log_odds(a: float) -> float:
        return a - math.log(1 - math.exp(a))

    orpo = 1.0 + 0.1 * -math.log(1 / (1 + math.exp(-(log_odds(-1.0) - log_odds(-2.0)))))
    assert math.isclose(preference_loss("orpo", b, p)[0].item(), orpo, rel_tol=1e-9)


def test_reference_free_losses_ignore_the_reference() -> None:
    p = PreferenceLossParams()
    for name in ("simpo", "orpo"):
        assert not PREFERENCE_LOSSES[name].uses_reference
        a = preference_loss(name, batch(-3.0, -5.0, -1.0, -9.0), p)[0].item()
        assert a == preference_loss(name, batch(-3.0, -5.0, -7.0, -2.0), p)[0].item()


@settings(max_examples=60, deadline=None)
@given(logprob, logprob, logprob, logprob, length, length, st.floats(0.05, 2.0), st.floats(0.0, 0.45))
def test_gradients_raise_chosen_and_lower_rejected(
    lc: float, lr: float, rc: float, rr: float, nc: int, nr: int, beta: float, eps: float
) -> None:
    """Every loss but IPO never asks to lower the chosen logprob or raise the rejected one; IPO
    pulls the margin towards 1/(2 beta) from both sides. Gradients match finite differences."""
    p = PreferenceLossParams(beta=beta, label_smoothing=eps)
    for name in PREFERENCE_LOSSES:
        b = batch(lc, lr, rc, rr, nc, nr)
        loss, _ = preference_loss(name, b, p)
        loss.backward()
        assert b.chosen.grad is not None and b.rejected.grad is not None
        g_c, g_r = b.chosen.grad.item(), b.rejected.grad.item()
        if name == "ipo":
            target = 1 / (2 * beta)
            assert g_c * (b.mean_margin.item() - target) >= 0 and g_r * (b.mean_margin.item() - target) <= 0
        elif name in ("cdpo", "robust") and eps > 0:
            pass  # label smoothing pulls back towards a finite margin; checked by finite differences below
        else:
            assert g_c <= 1e-12 and g_r >= -1e-12, (name, g_c, g_r)
        h = 1e-6
        up = preference_loss(name, batch(lc + h, lr, rc, rr, nc, nr), p)[0].item()
        down = preference_loss(name, batch(lc - h, lr, rc, rr, nc, nr), p)[0].item()
        if name != "hinge":  # piecewise linear: finite differences straddle the kink
            assert math.isclose((up - down) / (2 * h), g_c, rel_tol=1e-4, abs_tol=1e-6), name


@pytest.mark.parametrize("loss_type", sorted(PREFERENCE_LOSSES))
def test_each_loss_trains_through_forward_backward_custom_on_noop(tmp_path: Path, loss_type: str) -> None:
    run_dir = run_dpo_recipe(
        tmp_path, ["backend=noop", "data.max_steps=2", "eval.every=0", f"dpo.loss_type={loss_type}"]
    )
    rows = read_metrics(run_dir.metrics)
    assert len(rows) == 2 and all(math.isfinite(row["dpo_loss"]) for row in rows)


def test_dpo_win_rate_with_a_learned_judge_on_noop(tmp_path: Path) -> None:
    run_dir = run_dpo_recipe(
        tmp_path,
        [
            "backend=noop",
            "data.max_steps=2",
            "eval.every=2",
            "win_rate.prompts=4",
            "win_rate.judge=preference_model",
            "win_rate.judge_model.model_name=tiny",
        ],
    )
    last = read_metrics(run_dir.metrics)[-1]
    assert 0.0 <= last["eval/win_rate"] <= 1.0 and last["eval/win_rate_prompts"] == 4


@pytest.mark.slow
@pytest.mark.parametrize("loss_type", sorted(PREFERENCE_LOSSES))
def test_each_loss_trains_through_forward_backward_custom_on_local(tmp_path: Path, loss_type: str) -> None:
    run_dir = run_dpo_recipe(
        tmp_path,
        [
            "backend=local",
            "data.max_steps=2",
            "eval.every=0",
            "data.batch_size=4",
            "data.max_length=48",
            f"dpo.loss_type={loss_type}",
            "local.always_grad_norm=true",
        ],
    )
    rows = read_metrics(run_dir.metrics)
    assert len(rows) == 2 and all(math.isfinite(row["dpo_loss"]) for row in rows)
    assert rows[0]["optim/grad_norm"] > 0


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge", "simpo", "orpo"])
def test_label_smoothing_on_a_loss_that_ignores_it_is_a_config_error(loss_type: str) -> None:
    """A TRL<1.0 config (`sigmoid` + `label_smoothing`) is told to say `cdpo`, not silently changed."""
    overrides = ["log_path=unused", f"dpo.loss_type={loss_type}", "dpo.label_smoothing=0.1"]
    with pytest.raises(ConfigError, match=r"label_smoothing.*cdpo.*robust"):
        load_config(get_recipe("dpo").config_cls, None, overrides)
    for reader in ("cdpo", "robust"):
        config = load_config(
            get_recipe("dpo").config_cls, None, [*overrides[:1], f"dpo.loss_type={reader}", overrides[2]]
        )
        assert getattr(config, "dpo").label_smoothing == 0.1  # noqa: B009 (the recipe's config class is dynamic)
