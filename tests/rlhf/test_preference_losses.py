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
from train_core.preference.losses import (
    LABEL_SMOOTHING_LOSSES,
    PREFERENCE_LOSSES,
    PairBatch,
    PreferenceLossParams,
    PreferenceObjective,
    preference_loss,
)

logprob = st.floats(-40.0, -0.5)
length = st.integers(1, 30)


def batch(lc: float, lr: float, rc: float, rr: float, nc: int = 5, nr: int = 5) -> PairBatch:
    t = lambda v: torch.tensor([float(v)], dtype=torch.float64, requires_grad=True)  # noqa: E731
    return PairBatch(t(lc), t(lr), t(rc), t(rr), t(nc).detach(), t(nr).detach())


LN2 = math.log(2)


def _at_reference(beta: float, eps: float) -> dict[str, float]:
    """Each loss at c = r = 0 (policy = reference), from its formula by hand."""
    half_over_beta = 1 / (2 * beta)
    return {
        "sigmoid": LN2,
        "hinge": 1.0,
        "ipo": half_over_beta**2,
        "exo_pair": 0.5 * (math.log(0.5) - math.log(1 - eps)) + 0.5 * (math.log(0.5) - math.log(eps)),
        "nca_pair": 2 * LN2,
        "robust": LN2,
        "bco_pair": 2 * LN2,
        "sppo_hard": 2 * half_over_beta**2,
        "aot": LN2,
        "aot_unpaired": LN2,
        "apo_zero": 1.0,
        "apo_down": 1.0,
        "discopop": 0.5 * LN2 + 0.5,
        "sigmoid_norm": LN2,
        "cdpo": LN2,
    }


@pytest.mark.parametrize(("loss_type", "expected"), sorted(_at_reference(0.5, 0.2).items()))
def test_values_when_the_policy_equals_the_reference(loss_type: str, expected: float) -> None:
    p = PreferenceLossParams(beta=0.5, label_smoothing=0.2)
    assert math.isclose(preference_loss(loss_type, batch(-3.0, -4.0, -3.0, -4.0), p)[0].item(), expected)


def test_sft_is_the_batch_token_mean_nll() -> None:
    b = PairBatch(
        *(torch.tensor(v, dtype=torch.float64) for v in ([-3.0, -1.0], [-9.0, -9.0], [0.0, 0.0])),
        *(torch.tensor(v, dtype=torch.float64) for v in ([0.0, 0.0], [2.0, 6.0], [1.0, 1.0])),
    )
    assert preference_loss("sft", b, PreferenceLossParams())[0].item() == pytest.approx(4.0 / 8.0)


def test_combined_losses_are_the_weighted_sum() -> None:
    p = PreferenceLossParams(beta=0.5)
    b = batch(-2.0, -9.0, -3.0, -6.0, nc=2, nr=4)
    parts = {name: preference_loss(name, b, p)[0].item() for name in ("sigmoid", "bco_pair", "sft")}
    combined = preference_loss(["sigmoid", "bco_pair", "sft"], b, p, [0.8, 0.2, 1.0])[0].item()
    assert combined == pytest.approx(0.8 * parts["sigmoid"] + 0.2 * parts["bco_pair"] + parts["sft"], rel=1e-12)


def test_f_divergences_score_the_density_ratio() -> None:
    """f-DPO: forward KL scores `1 - 1/u`, JS `log 2 + log sigma(log u)`, alpha `(u^(a-1) - 1)/(a-1)`."""
    c, r = 0.7, -0.4  # log-ratios
    b = batch(c - 2.0, r - 5.0, -2.0, -5.0)
    for f_divergence, score in (
        ("forward_kl", lambda x: 1 - math.exp(-x)),
        ("js_divergence", lambda x: LN2 - math.log1p(math.exp(-x))),
        ("alpha_divergence", lambda x: (math.exp(-0.7 * x) - 1) / -0.7),
    ):
        p = PreferenceLossParams(beta=0.5, f_divergence=f_divergence, f_alpha=0.3)  # type: ignore[arg-type]
        expected = math.log1p(math.exp(-0.5 * (score(c) - score(r))))
        assert preference_loss("sigmoid", b, p)[0].item() == pytest.approx(expected, rel=1e-12), f_divergence


def test_objectives_refuse_what_trl_refuses() -> None:
    with pytest.raises(ValueError, match="no f-divergence form"):
        PreferenceObjective((("nca_pair", 1.0),), PreferenceLossParams(f_divergence="js_divergence"))
    with pytest.raises(ValueError, match="exo_pair needs"):
        PreferenceObjective((("exo_pair", 1.0),), PreferenceLossParams())
    with pytest.raises(ValueError, match="sort the batch"):
        PreferenceObjective((("aot", 1.0),), PreferenceLossParams(), use_weighting=True)
    with pytest.raises(ValueError, match="unknown preference loss"):
        PreferenceObjective((("dpo", 1.0),))


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
    for name in ("simpo", "orpo", "sft"):
        assert not PREFERENCE_LOSSES[name].uses_reference
        a = preference_loss(name, batch(-3.0, -5.0, -1.0, -9.0), p)[0].item()
        assert a == preference_loss(name, batch(-3.0, -5.0, -7.0, -2.0), p)[0].item()


MONOTONE = {"sigmoid", "hinge", "bco_pair", "apo_zero", "sigmoid_norm", "simpo", "aot", "aot_unpaired"}
MONOTONE |= {"robust", "cdpo", "sft"}
"""Losses that never ask to lower the chosen logprob or raise the rejected one (the smoothed ones
at eps = 0: label smoothing pulls back towards a finite margin). The others have an interior
optimum (ipo, sppo_hard, exo_pair; nca_pair's chosen term), lower the chosen on purpose (apo_down), are not monotone in
the margin (discopop: near 0 its exponential part dominates) or are not built on it (orpo)."""
EPS_OF = {"exo_pair": (1e-3, 0.45)}


def _pairs(values: list[tuple[float, float, float, float, int, int]]) -> PairBatch:
    columns = list(zip(*values, strict=True))
    t = lambda v: torch.tensor([float(x) for x in v], dtype=torch.float64, requires_grad=True)  # noqa: E731
    return PairBatch(
        t(columns[0]), t(columns[1]), t(columns[2]), t(columns[3]), t(columns[4]).detach(), t(columns[5]).detach()
    )


pair = st.tuples(logprob, logprob, logprob, logprob, length, length)


@pytest.mark.parametrize("loss_type", sorted(PREFERENCE_LOSSES))
@settings(max_examples=40, deadline=None)
@given(
    pairs=st.lists(pair, min_size=1, max_size=4),
    beta=st.floats(0.05, 2.0),
    unit=st.floats(0.0, 1.0),
    shift=st.floats(-3.0, 3.0),
)
def test_property_gradients_and_invariances(
    loss_type: str, pairs: list[tuple[float, float, float, float, int, int]], beta: float, unit: float, shift: float
) -> None:
    """Per loss, on any batch: (1) autograd's gradient is the finite-difference one; (2) a loss on
    log-ratios is unchanged by adding one constant to a completion's policy and reference logprob,
    a reference-free one by any change of the reference; (3) the monotone losses never ask to
    lower a chosen or raise a rejected logprob."""
    low, high = EPS_OF.get(loss_type, (0.0, 0.45))
    p = PreferenceLossParams(beta=beta, label_smoothing=low + unit * (high - low))
    b = _pairs(pairs)
    loss, _ = preference_loss(loss_type, b, p)
    loss.backward()
    assert b.chosen.grad is not None
    rejected_grad = b.rejected.grad if b.rejected.grad is not None else torch.zeros_like(b.rejected)  # sft: none
    h = 1e-6
    for index in range(len(pairs)):
        bumped = [list(row) for row in pairs]
        bumped[index][0] += h
        up = preference_loss(loss_type, _pairs([tuple(r) for r in bumped]), p)[0].item()  # type: ignore[misc]
        bumped[index][0] -= 2 * h
        down = preference_loss(loss_type, _pairs([tuple(r) for r in bumped]), p)[0].item()  # type: ignore[misc]
        if loss_type not in ("hinge", "aot", "aot_unpaired"):  # kinks (hinge) and sort ties
            assert math.isclose((up - down) / (2 * h), b.chosen.grad[index].item(), rel_tol=1e-4, abs_tol=1e-6)
    moved = [(lc + shift, lr, rc + shift, rr, nc, nr) for lc, lr, rc, rr, nc, nr in pairs]
    if not PREFERENCE_LOSSES[loss_type].uses_reference:
        moved = [(lc, lr, rc + shift, rr - shift, nc, nr) for lc, lr, rc, rr, nc, nr in pairs]
    if loss_type != "sft":  # the NLL of the chosen completions moves with their logprobs
        again = preference_loss(loss_type, _pairs(moved), p)[0].item()
        assert math.isclose(again, loss.item(), rel_tol=1e-9, abs_tol=1e-9)
    if loss_type in MONOTONE and (loss_type not in LABEL_SMOOTHING_LOSSES or p.label_smoothing == 0):
        assert (b.chosen.grad <= 1e-12).all() and (rejected_grad >= -1e-12).all()


@pytest.mark.parametrize("loss_type", sorted(PREFERENCE_LOSSES))
def test_each_loss_trains_through_forward_backward_custom_on_noop(tmp_path: Path, loss_type: str) -> None:
    smoothing = ["dpo.label_smoothing=0.001"] if loss_type == "exo_pair" else []
    run_dir = run_dpo_recipe(
        tmp_path, ["backend=noop", "data.max_steps=2", "eval.every=0", f"dpo.loss_type={loss_type}", *smoothing]
    )
    rows = read_metrics(run_dir.metrics)
    assert len(rows) == 2 and all(math.isfinite(row["dpo_loss"]) for row in rows)


@pytest.mark.parametrize(
    "options",
    [
        ["dpo.loss_type=[sigmoid,bco_pair,sft]", "dpo.loss_weights=[0.8,0.2,1.0]"],
        ["dpo.rpo_alpha=0.5", "dpo.ld_alpha=0.3", "dpo.f_divergence_type=js_divergence"],
        ["dpo.reference_free=true", "dpo.loss_type=ipo"],
        ["dpo.sync_ref_model=true", "dpo.ref_model_sync_steps=1", "dpo.ref_model_mixup_alpha=1.0"],
    ],
)
def test_dpo_options_run_on_noop(tmp_path: Path, options: list[str]) -> None:
    run_dir = run_dpo_recipe(tmp_path, ["backend=noop", "data.max_steps=2", "eval.every=0", *options])
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


ALL_LOSSES = f"dpo.loss_type=[{','.join(PREFERENCE_LOSSES)}]"


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [
        [ALL_LOSSES, "dpo.label_smoothing=0.01"],  # every formula, summed, in one step
        ["dpo.use_weighting=true", "dpo.ld_alpha=0.5", "dpo.rpo_alpha=0.2", "dpo.f_divergence_type=forward_kl"],
        ["dpo.sync_ref_model=true", "dpo.ref_model_sync_steps=1", "dpo.ref_model_mixup_alpha=0.5"],
    ],
)
def test_losses_and_options_train_through_forward_backward_custom_on_local(tmp_path: Path, options: list[str]) -> None:
    run_dir = run_dpo_recipe(
        tmp_path,
        [
            "backend=local",
            "data.max_steps=2",
            "eval.every=0",
            "data.batch_size=4",
            "data.max_length=48",
            *options,
            "local.always_grad_norm=true",
        ],
    )
    rows = read_metrics(run_dir.metrics)
    assert len(rows) == 2 and all(math.isfinite(row["dpo_loss"]) for row in rows)
    assert rows[0]["optim/grad_norm"] > 0
    if "dpo.sync_ref_model=true" in options:  # a mixed reference saved after each step (TR-DPO)
        synced = sorted(path.name for path in tmp_path.rglob("reference_0*") if path.is_dir())
        assert synced == ["reference_000001", "reference_000002"]


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge", "simpo", "orpo", "discopop"])
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
