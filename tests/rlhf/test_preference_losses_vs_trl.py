"""Every preference loss whose name TRL uses, against TRL 1.16's own code on the same tensors:
loss value and gradient with respect to the per-token logprobs (or, for ORPO, the logits), in
float64, on several seeds and on the edge cases (ties, margins at float32 rounding, empty
completions), alone and combined (`loss_type: [..]` with `loss_weights`), under each
f-divergence, LD-DPO's `ld_alpha` and WPO's `use_weighting` (`trl_dpo_harness`).

`cdpo` (TRL's label-smoothed sigmoid) and `simpo` come from `CPOTrainer.cpo_loss`, `orpo` from
`ORPOTrainer.odds_ratio_loss` plus the chosen-token cross entropy its `concatenated_forward`
adds. TRL is in the test extra (`trl==1.16.*`): these tests import it and never skip."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trl.experimental.cpo.cpo_trainer import CPOTrainer
from trl.experimental.orpo.orpo_trainer import ORPOTrainer

from tests.rlhf.trl_dpo_harness import DPOCase, DPOSettings, compare, kitchen_loss, random_case
from train_core.preference.losses import (
    FDIV_LOSSES,
    TRL_DPO_LOSS_TYPES,
    PairBatch,
    PreferenceLossParams,
    preference_loss,
)

pytestmark = pytest.mark.slow  # importing TRL takes 10-50 s on 2 cores

# TRL's loss methods run on stand-in trainers and plain tensors (the module doc): typed loosely.
CPO: Any = CPOTrainer
ORPO: Any = ORPOTrainer

LENGTHS = (3, 8, 5, 6, 2, 7, 8, 4)  # 4 pairs: chosen rows, then rejected rows
SEEDS = (0, 1, 2)
VALUE_TOL, GRAD_TOL = 1e-12, 1e-12
FLOAT32_CONSTANTS = {"exo_pair"}
"""TRL computes `log eps` and `log(1 - eps)` of a float32 `torch.tensor(label_smoothing)`: a
residue of float32's rounding (~1e-8) in value and gradient, not a different formula."""


def _tolerance(keys: DPOSettings, case: DPOCase) -> float:
    if case.policy_RT.dtype != torch.float64 or set(keys.loss_type) & FLOAT32_CONSTANTS:
        return 1e-6
    return VALUE_TOL


def _settings(loss_type: str, **keys: object) -> DPOSettings:
    smoothing = {"exo_pair": 1e-3, "robust": 0.2, "aot": 0.1, "aot_unpaired": 0.1}.get(loss_type, 0.0)
    return DPOSettings(loss_type=(loss_type,), label_smoothing=smoothing, **keys)  # type: ignore[arg-type]


def _assert_equal(keys: DPOSettings, case: DPOCase) -> None:
    ours, theirs, value_diff, grad_diff = compare(keys, case)
    tolerance = _tolerance(keys, case)
    assert torch.isfinite(ours) and value_diff <= tolerance * max(1.0, float(theirs.abs())), (ours, theirs)
    assert grad_diff <= tolerance, grad_diff


def test_the_15_trl_names_are_kitchens() -> None:
    assert (
        *("sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard"),
        *("aot", "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm"),
    ) == TRL_DPO_LOSS_TYPES


@pytest.mark.parametrize("loss_type", TRL_DPO_LOSS_TYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_each_loss_type_equals_trls(loss_type: str, seed: int) -> None:
    _assert_equal(_settings(loss_type), random_case(seed, LENGTHS))


@pytest.mark.parametrize("loss_type", TRL_DPO_LOSS_TYPES)
def test_edge_cases_equal_trls(loss_type: str) -> None:
    """Ties (policy = reference, and chosen = rejected), margins at float32 rounding (policy one
    float32 ulp off the reference), a pair with an empty chosen and one with an empty rejected
    completion, and margins large enough to saturate the sigmoid."""
    case = random_case(7, LENGTHS)
    tie = DPOCase(case.reference_RT.clone(), case.reference_RT, case.log_sum_sq_RT, LENGTHS)
    same_rows = torch.cat([case.policy_RT[:4], case.policy_RT[:4]])
    same_lengths = (*LENGTHS[:4], *LENGTHS[:4])
    identical = DPOCase(same_rows, torch.cat([case.reference_RT[:4]] * 2), case.log_sum_sq_RT, same_lengths)
    rounding = case.reference_RT * (1 + 2.0**-23)
    ulp = DPOCase(rounding, case.reference_RT, case.log_sum_sq_RT, LENGTHS)
    empty = DPOCase(case.policy_RT, case.reference_RT, case.log_sum_sq_RT, (0, 8, 5, 6, 2, 0, 8, 4))
    wide = random_case(8, LENGTHS, spread=40.0)
    for edge in (tie, identical, ulp, empty, wide):
        _assert_equal(_settings(loss_type), edge)


@pytest.mark.parametrize("f_divergence", ["forward_kl", "js_divergence"])
@pytest.mark.parametrize("loss_type", sorted(FDIV_LOSSES - {"cdpo"}))
def test_f_divergences_equal_trls(loss_type: str, f_divergence: str) -> None:
    for seed in SEEDS:
        _assert_equal(_settings(loss_type, f_divergence_type=f_divergence), random_case(seed, LENGTHS))


@pytest.mark.parametrize("alpha", [0.5, 0.3, 1.0])
@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge", "robust"])
def test_alpha_divergence_equals_trls_in_float32(loss_type: str, alpha: float) -> None:
    """TRL's alpha divergence clamps by dtype and has no float64 entry: compared in float32."""
    for seed in SEEDS:
        case = random_case(seed, LENGTHS, dtype=torch.float32)
        keys = {"f_divergence_type": "alpha_divergence", "f_alpha_divergence_coef": alpha}
        _assert_equal(_settings(loss_type, **keys), case)


@pytest.mark.parametrize(
    ("loss_types", "weights"),
    [
        (("sigmoid", "bco_pair", "sft"), (0.8, 0.2, 1.0)),  # MPO, TRL's documented example
        (("sigmoid", "sft"), (1.0, 0.4)),  # RPO: TRL < 1.0's rpo_alpha = 0.4
        (("ipo", "hinge", "apo_zero"), None),
        (("aot", "nca_pair"), (0.5, 2.0)),
    ],
)
def test_combinations_equal_trls(loss_types: tuple[str, ...], weights: tuple[float, ...] | None) -> None:
    for seed in SEEDS:
        keys = DPOSettings(loss_type=loss_types, loss_weights=weights, label_smoothing=0.1)
        _assert_equal(keys, random_case(seed, LENGTHS))


@pytest.mark.parametrize("ld_alpha", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "sft", "apo_down"])
def test_ld_alpha_equals_trls(loss_type: str, ld_alpha: float) -> None:
    for seed in SEEDS:
        _assert_equal(_settings(loss_type, ld_alpha=ld_alpha), random_case(seed, LENGTHS))


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "bco_pair", "discopop", "sigmoid_norm", "apo_zero"])
def test_wpo_weighting_equals_trls(loss_type: str) -> None:
    """(TRL 1.16 cannot weight `sft` or `hinge`: it multiplies their per-pair losses in place,
    which fails for the expanded batch NLL and breaks the backward of `relu`.)"""
    for seed in SEEDS:
        _assert_equal(_settings(loss_type, use_weighting=True), random_case(seed, LENGTHS))
    combined = DPOSettings(loss_type=(loss_type, "nca_pair"), loss_weights=(1.0, 0.5), use_weighting=True, ld_alpha=0.5)
    _assert_equal(combined, random_case(3, LENGTHS))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    loss_type=st.sampled_from(TRL_DPO_LOSS_TYPES),
    seed=st.integers(0, 2**20),
    lengths=st.lists(st.integers(1, 9), min_size=2, max_size=10).filter(lambda xs: len(xs) % 2 == 0),
    beta=st.floats(0.01, 5.0),
    spread=st.floats(0.1, 20.0),
)
def test_any_batch_equals_trl(loss_type: str, seed: int, lengths: list[int], beta: float, spread: float) -> None:
    """Property: on any batch (pairs, lengths, logprob scale, beta), every loss equals TRL's."""
    keys = DPOSettings(
        loss_type=(loss_type,),
        beta=beta,
        label_smoothing=_settings(loss_type).label_smoothing,
    )
    case = random_case(seed, lengths, spread=spread)
    _assert_equal(keys, case)


def _cpo_reference(loss_type: str, case: DPOCase, policy_RT: torch.Tensor, eps: float) -> torch.Tensor:
    """CPO is DPO without a reference: `cdpo` is its label-smoothed sigmoid on the reference-
    corrected log-ratios (what TRL's DPO `sigmoid` computed before 1.0); `simpo` its SimPO on
    length-averaged logprobs, reference-free."""
    shift = case.mask_RL[:, 1:].double()
    seq, lengths = (policy_RT * shift).sum(1), case.mask_RL.sum(1).double()
    if loss_type == "cdpo":
        scores, cpo_type, smoothing = seq - (case.reference_RT * shift).sum(1), "sigmoid", eps
    else:
        scores, cpo_type, smoothing = seq / lengths, "simpo", 0.0
    trainer = SimpleNamespace(
        alpha=0.0,
        beta=0.3,
        label_smoothing=smoothing,
        loss_type=cpo_type,
        simpo_gamma=0.4,
        accelerator=SimpleNamespace(device="cpu"),
    )
    losses, _, _ = CPO.cpo_loss(trainer, scores[: case.pairs], scores[case.pairs :])
    return losses.mean()


@pytest.mark.parametrize("loss_type", ["cdpo", "simpo"])
@pytest.mark.parametrize("seed", SEEDS)
def test_cpo_names_equal_trls(loss_type: str, seed: int) -> None:
    case = random_case(seed, LENGTHS)
    ours_RT = case.policy_RT.clone().requires_grad_(True)
    theirs_RT = case.policy_RT.clone().requires_grad_(True)
    shift = case.mask_RL[:, 1:].double()
    seq, ref_seq, lengths = (ours_RT * shift).sum(1), (case.reference_RT * shift).sum(1), case.mask_RL.sum(1).double()
    p = case.pairs
    pairs = PairBatch(seq[:p], seq[p:], ref_seq[:p], ref_seq[p:], lengths[:p], lengths[p:])
    ours = preference_loss(loss_type, pairs, PreferenceLossParams(beta=0.3, label_smoothing=0.2, simpo_gamma=0.4))[0]
    theirs = _cpo_reference(loss_type, case, theirs_RT, 0.2)
    ours.backward()
    theirs.backward()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12, abs=1e-14)
    assert ours_RT.grad is not None and theirs_RT.grad is not None
    torch.testing.assert_close(ours_RT.grad, theirs_RT.grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("seed", [0, 1])
def test_orpo_value_and_gradient_equal_trls(seed: int) -> None:
    """ORPO on logits: TRL's loss is `chosen NLL - mean(beta * logsigmoid(log odds ratio))`, the
    NLL one token mean over the batch's chosen tokens, the odds on length-averaged logprobs. The
    chosen completions are equally long here, where that NLL equals kitchen's per-pair mean (with
    unequal lengths the two weigh the pairs differently; see `train_core.preference.losses`)."""
    mask = random_case(0, LENGTHS).mask_RL
    pairs, length, vocab = 4, mask.shape[1], 11
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(2 * pairs, length, vocab, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, vocab, (2 * pairs, length), generator=generator)
    mask[:pairs] = 0.0
    mask[:pairs, 3:] = 1.0  # chosen completions of one length
    labels = labels.masked_fill(mask == 0, -100)
    ours_logits = logits.clone().requires_grad_(True)
    theirs_logits = logits.clone().requires_grad_(True)

    token_lp = torch.log_softmax(ours_logits[:, :-1], -1).gather(-1, labels[:, 1:].clamp(min=0).unsqueeze(-1))[..., 0]
    shift = mask[:, 1:].double()
    seq, lengths = (token_lp * shift).sum(1), mask.sum(1).double()
    zero = torch.zeros(pairs, dtype=torch.float64)
    batch = PairBatch(seq[:pairs], seq[pairs:], zero, zero, lengths[:pairs], lengths[pairs:])
    ours = preference_loss("orpo", batch, PreferenceLossParams(orpo_lambda=0.25))[0]

    nll = torch.nn.CrossEntropyLoss()(
        theirs_logits[:pairs, :-1].reshape(-1, vocab), labels[:pairs, 1:].reshape(-1)
    )  # what TRL's concatenated_forward computes as chosen_nll_loss
    avg = ORPO.get_batch_logps(theirs_logits, labels, average_log_prob=True)
    trainer = SimpleNamespace(beta=0.25, accelerator=SimpleNamespace(device="cpu"))
    odds_losses, *_ = ORPO.odds_ratio_loss(trainer, avg[:pairs], avg[pairs:])
    theirs = nll - odds_losses.mean()  # get_batch_loss_metrics
    ours.backward()
    theirs.backward()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    assert ours_logits.grad is not None and theirs_logits.grad is not None
    torch.testing.assert_close(ours_logits.grad, theirs_logits.grad, rtol=1e-5, atol=1e-7)


CPO_AS_DPO = {"sigmoid": "cdpo", "hinge": "hinge", "ipo": "ipo", "simpo": "simpo"}
"""TRL's CPOTrainer `loss_type` -> kitchen's loss with `dpo.reference_free` (CPO is DPO without a
reference: TRL's CPO sigmoid is label-smoothed, kitchen's `cdpo`; its ipo and simpo score
length-averaged logprobs, as kitchen's `ipo` and `simpo` do)."""


@pytest.mark.parametrize("cpo_alpha", [0.0, 1.0])
@pytest.mark.parametrize("cpo_type", sorted(CPO_AS_DPO))
def test_cpo_is_reference_free_dpo_with_the_sft_term(cpo_type: str, cpo_alpha: float) -> None:
    """TRL's CPO loss, `mean(cpo_loss) + cpo_alpha * NLL(chosen)`, equals kitchen's DPO custom
    loss with `dpo.reference_free` (reference logprobs 0), `dpo.loss_type: [NAME, sft]` and
    `dpo.loss_weights: [1, cpo_alpha]`. TRL's NLL is `nn.CrossEntropyLoss` over the chosen
    tokens, `-sum(lp) / count` of their logprobs, computed so here."""
    eps, gamma = (0.2 if cpo_type == "sigmoid" else 0.0), 0.4
    for seed in SEEDS:
        case = random_case(seed, LENGTHS)
        free = DPOCase(case.policy_RT, torch.zeros_like(case.reference_RT), case.log_sum_sq_RT, LENGTHS)
        terms = (CPO_AS_DPO[cpo_type], "sft")
        keys = DPOSettings(loss_type=terms, loss_weights=(1.0, cpo_alpha), label_smoothing=eps, simpo_gamma=gamma)
        ours_RT = case.policy_RT.clone().requires_grad_(True)
        ours = kitchen_loss(keys, free, ours_RT)

        theirs_RT = case.policy_RT.clone().requires_grad_(True)
        shift = case.mask_RL[:, 1:].double()
        sums, lengths = (theirs_RT * shift).sum(1), case.mask_RL.sum(1).double()
        scores = sums / lengths if cpo_type in ("ipo", "simpo") else sums
        trainer = SimpleNamespace(
            alpha=0.0,
            beta=0.3,
            label_smoothing=eps,
            loss_type=cpo_type,
            simpo_gamma=gamma,
            accelerator=SimpleNamespace(device="cpu"),
        )
        losses, _, _ = CPO.cpo_loss(trainer, scores[: case.pairs], scores[case.pairs :])
        nll = -sums[: case.pairs].sum() / lengths[: case.pairs].sum()
        theirs = losses.mean() + cpo_alpha * nll  # get_batch_loss_metrics
        ours.backward()
        theirs.backward()
        assert ours.item() == pytest.approx(theirs.item(), rel=1e-12, abs=1e-14)
        assert ours_RT.grad is not None and theirs_RT.grad is not None
        torch.testing.assert_close(ours_RT.grad, theirs_RT.grad, rtol=1e-12, atol=1e-14)
