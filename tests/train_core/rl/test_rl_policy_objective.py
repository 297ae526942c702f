"""The whole RL objective (policy loss, aggregation, KL in the loss, entropy bonus): hand-worked,
the custom route equal to the built-in route on folded datums, and a cross-check against verl's
actor loss composition on the same tensors."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from train_core.errors import InvalidInputError
from train_core.losses import get_loss_fn, loss_ratios
from train_core.rl.policy_objective import AGGREGATION_MODES, REFERENCE_LOGPROBS, PolicyObjective, aggregate_loss
from train_core.types import Datum, ModelInput, TensorData

_PROPERTY = settings(max_examples=25, deadline=None)
"""Property tests here run 25 examples with no deadline (the suite's time budget; a busy machine)."""


def _datum(sampled: list[float], advantages: list[float], mask: list[float], reference: list[float]) -> Datum:
    n = len(sampled)
    return Datum(
        ModelInput.from_ints(list(range(n))),
        {
            "target_tokens": TensorData.from_list(list(range(1, n + 1)), "int64"),
            "logprobs": TensorData.from_list(sampled, "float32"),
            "advantages": TensorData.from_list([a * m for a, m in zip(advantages, mask, strict=True)], "float32"),
            "mask": TensorData.from_list(mask, "float32"),
            REFERENCE_LOGPROBS: TensorData.from_list(reference, "float32"),
        },
    )


def test_hand_worked_objective() -> None:
    """importance_sampling, token_mean over 2 action tokens, k1 KL (coef 0.5), entropy (coef 0.1).
    Current lp = sampled (ratio 1): policy terms -A = [-1, 1]; k1 = lp - ref = [1, 2]; H = [2, 4].
    token_mean: ((-1 + 0.5 * 1 - 0.1 * 2) + (1 + 0.5 * 2 - 0.1 * 4)) / 2 = 0.45. The observation
    token (first) counts nothing, whatever its values."""
    datum = _datum([0.0, -1.0, -2.0], [0.0, 1.0, -1.0], [0.0, 1.0, 1.0], [-9.0, -2.0, -4.0])
    objective = PolicyObjective(
        "importance_sampling", aggregation="token_mean", kl_coef=0.5, kl_estimator="k1", entropy_coeff=0.1
    )
    lp = torch.tensor([-5.0, -1.0, -2.0], dtype=torch.float64, requires_grad=True)
    entropy = torch.tensor([100.0, 2.0, 4.0], dtype=torch.float64)
    loss, metrics = objective.loss([datum], [lp], [entropy])
    assert float(loss.detach()) == pytest.approx(0.45)
    loss.backward()
    assert lp.grad is not None
    # d/dlp: policy -r*A = [-1, 1], KL 0.5 * 1 each; over 2 tokens; the observation token 0.
    assert lp.grad.tolist() == pytest.approx([0.0, (-1 + 0.5) / 2, (1 + 0.5) / 2])
    means = loss_ratios(metrics)
    assert means["loss/kl"] == pytest.approx(1.5) and means["loss/entropy"] == pytest.approx(3.0)


_TOKEN = st.tuples(
    st.floats(-3, -0.05), st.floats(-0.8, 0.8), st.floats(-2, 2), st.sampled_from([0.0, 1.0, 1.0]), st.floats(-3, -0.05)
)


def _batch(tokens_D: list[list[tuple[float, float, float, float, float]]]) -> tuple[list[Datum], list[torch.Tensor]]:
    """Datums (sampled q, advantages, mask, reference) and current logprobs q + drift."""
    data = [
        _datum([q for q, *_ in t], [a for _, _, a, _, _ in t], [m for *_, m, _ in t], [r for *_, r in t])
        for t in tokens_D
    ]
    logprobs = [torch.tensor([q + d for q, d, *_ in t], dtype=torch.float64) for t in tokens_D]
    return data, logprobs


@_PROPERTY
@given(
    st.lists(st.lists(_TOKEN, min_size=1, max_size=5), min_size=1, max_size=4),
    st.sampled_from(AGGREGATION_MODES),
    st.sampled_from(["importance_sampling", "ppo", "cispo", "gspo", "ppo_dual"]),
)
def test_custom_route_equals_the_builtin_route_on_folded_datums(
    tokens_D: list[list[tuple[float, float, float, float, float]]], mode: str, loss_fn: str
) -> None:
    config = {"clip_ratio_c": 2.0} if loss_fn == "ppo_dual" else None
    name = "ppo" if loss_fn == "ppo_dual" else loss_fn
    objective = PolicyObjective(name, config, aggregation=mode, norm_tokens=6)
    data, logprobs = _batch(tokens_D)
    custom_lp = [lp.clone().requires_grad_() for lp in logprobs]
    custom, _ = objective.custom_loss_fn()(data, custom_lp)
    custom.backward()
    spec = get_loss_fn(name)
    builtin_lp = [lp.clone().requires_grad_() for lp in logprobs]
    builtin = torch.zeros((), dtype=torch.float64)
    for lp, datum in zip(builtin_lp, objective.builtin_data(data), strict=True):
        inputs = {key: datum.loss_fn_inputs[key].to_torch().double() for key in spec.input_keys}
        builtin = builtin + spec(lp, inputs, config)[0]
    builtin.backward()
    assert float(custom.detach()) == pytest.approx(float(builtin.detach()), rel=1e-5, abs=1e-6)
    for a, b in zip(custom_lp, builtin_lp, strict=True):
        assert a.grad is not None and b.grad is not None
        assert a.grad.tolist() == pytest.approx(b.grad.tolist(), rel=1e-5, abs=1e-6)


def _verl_actor_loss(
    old: torch.Tensor,
    new: torch.Tensor,
    ref: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    entropy: torch.Tensor,
    kl_coef: float,
    entropy_coeff: float,
    mode: str,
) -> torch.Tensor:
    """verl dp_actor.update_policy with use_kl_loss: pg_loss (compute_policy_loss_vanilla, clip 0.2
    both sides, dual clip c = 3) aggregated, minus entropy_coeff * agg(entropy), plus kl_coef *
    agg(kl_penalty(low_var_kl)); every agg_loss with the same loss_agg_mode. Rows all have tokens."""

    def agg(x: torch.Tensor) -> torch.Tensor:
        if mode == "token-mean":
            return (x * mask).sum() / mask.sum()
        return ((x * mask).sum(-1) / mask.sum(-1)).mean()  # seq-mean-token-mean

    ratio = torch.exp(torch.clamp(new - old, -20, 20))
    clipped1 = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.2))
    pg = torch.where(adv < 0, torch.min(-adv * 3.0, clipped1), clipped1)
    d = torch.clamp(ref - new, -20, 20)
    kl = torch.clamp(torch.exp(d) - d - 1, -10, 10)
    return agg(pg) - entropy_coeff * agg(entropy) + kl_coef * agg(kl)


@_PROPERTY
@given(st.integers(1, 4), st.integers(1, 5), st.data(), st.sampled_from(["token-mean", "seq-mean-token-mean"]))
def test_objective_matches_verl_actor_loss(b: int, t: int, data: st.DataObject, verl_mode: str) -> None:
    values = st.lists(st.floats(-2.5, -0.1), min_size=b * t, max_size=b * t)
    old = torch.tensor(data.draw(values), dtype=torch.float64).reshape(b, t)
    new = old + torch.tensor(
        data.draw(st.lists(st.floats(-1.5, 1.5), min_size=b * t, max_size=b * t)), dtype=torch.float64
    ).reshape(b, t)
    ref = torch.tensor(data.draw(values), dtype=torch.float64).reshape(b, t)
    adv = torch.tensor(data.draw(st.lists(st.floats(-2, 2), min_size=b, max_size=b)), dtype=torch.float64)[
        :, None
    ].expand(b, t)
    entropy = torch.tensor(
        data.draw(st.lists(st.floats(0, 3), min_size=b * t, max_size=b * t)), dtype=torch.float64
    ).reshape(b, t)
    lengths = data.draw(st.lists(st.integers(1, t), min_size=b, max_size=b))
    mask = torch.tensor([[1.0] * n + [0.0] * (t - n) for n in lengths], dtype=torch.float64)
    datums = [_datum(old[i].tolist(), adv[i].tolist(), mask[i].tolist(), ref[i].tolist()) for i in range(b)]
    objective = PolicyObjective(
        "ppo", {"clip_ratio_c": 3.0}, aggregation=verl_mode.replace("-", "_"), kl_coef=0.1, entropy_coeff=0.01
    )
    ours, _ = objective.loss(datums, list(new), list(entropy))
    # the datums store float32; verl sees the same rounded values
    old32, ref32, adv32 = (x.float().double() for x in (old, ref, adv))
    theirs = _verl_actor_loss(old32, new, ref32, adv32 * mask, mask, entropy, 0.1, 0.01, verl_mode)
    assert float(ours) == pytest.approx(float(theirs), rel=1e-6, abs=1e-6)


def test_masked_tokens_get_no_gradient_from_any_term() -> None:
    datum = _datum([-1.0, -1.0, -1.0], [1.0, 1.0, 1.0], [1.0, 0.0, 1.0], [-3.0, -3.0, -3.0])
    lp = torch.tensor([-0.5, -50.0, -0.5], dtype=torch.float64, requires_grad=True)
    objective = PolicyObjective(
        "ppo", aggregation="seq_mean_token_mean", kl_coef=1.0, kl_estimator="k3+", entropy_coeff=0.5
    )
    loss, _ = objective.loss([datum], [lp], [torch.tensor([1.0, 1e6, 1.0])])
    loss.backward()
    assert lp.grad is not None and math.isfinite(float(loss.detach()))
    assert lp.grad[1] == 0.0 and lp.grad[0] != 0.0


def test_routes_and_refusals() -> None:
    plain = PolicyObjective("ppo", {"clip_high_threshold": 1.28}, aggregation="token_mean")
    assert plain.custom_route_reasons(service=True) == []
    assert PolicyObjective("ppo", {"clip_ratio_c": 3.0}).custom_route_reasons(service=False) == []
    assert PolicyObjective("ppo", {"clip_ratio_c": 3.0}).custom_route_reasons(service=True) == [
        "loss_fn_config['clip_ratio_c'] is kitchen's extension of 'ppo'"
    ]
    kl = PolicyObjective("importance_sampling", kl_coef=0.04)
    assert kl.custom_route_reasons(service=False) == ["a KL term in the loss (kl_coef 0.04, estimator k3)"]
    entropy = PolicyObjective("ppo", entropy_coeff=0.01)
    assert entropy.custom_route_reasons(service=False) == ["an entropy bonus (entropy_coeff 0.01)"]
    datum = _datum([-1.0], [1.0], [1.0], [-1.0])
    with pytest.raises(InvalidInputError, match="does not hand the loss per-token entropies"):
        entropy.custom_loss_fn()([datum], [torch.zeros(1)])
    with pytest.raises(InvalidInputError, match="needs the policy's per-token entropy"):
        entropy.loss([datum], [torch.zeros(1)])
    no_reference = Datum(datum.model_input, {k: v for k, v in datum.loss_fn_inputs.items() if k != REFERENCE_LOGPROBS})
    with pytest.raises(
        InvalidInputError, match=r"datum 0: a KL term in the loss needs loss_fn_inputs\['reference_logprobs'\]"
    ):
        kl.loss([no_reference], [torch.zeros(1)])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"loss_fn": "dro", "loss_fn_config": {"beta": 0.1}, "aggregation": "token_mean"},
            "only aggregates as token_sum",
        ),
        ({"loss_fn": "ppo", "aggregation": "seq_mean_token_sum_norm"}, "needs a positive constant norm_tokens"),
        ({"loss_fn": "ppo", "kl_estimator": "k5"}, "unknown KL estimator 'k5'"),
        ({"loss_fn": "ppo", "kl_coef": -1.0}, "must be >= 0"),
        ({"loss_fn": "ppo", "loss_fn_config": {"clip_ratio_c": 0.5}}, "must be > 1"),
        ({"loss_fn": "ppo2"}, "unknown loss_fn 'ppo2'"),
    ],
)
def test_bad_objectives_fail_when_built(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        PolicyObjective(**kwargs)  # type: ignore[arg-type]


def test_aggregate_of_the_token_terms_is_the_objective_on_a_padded_batch() -> None:
    """The objective equals aggregate_loss over the [B, T] matrix of its per-token terms."""
    data, logprobs = _batch(
        [[(-1.0, 0.2, 1.0, 1.0, -1.5), (-2.0, -0.3, 1.0, 1.0, -1.0)], [(-1.5, 0.1, -1.0, 1.0, -2.0)]]
    )
    objective = PolicyObjective("ppo", aggregation="seq_mean_token_mean", kl_coef=0.2)
    loss, _ = objective.loss(data, logprobs)
    spec = get_loss_fn("ppo")
    rows = []
    for datum, lp in zip(data, logprobs, strict=True):
        inputs = {k: datum.loss_fn_inputs[k].to_torch().double() for k in ("logprobs", "advantages")}
        d = datum.loss_fn_inputs[REFERENCE_LOGPROBS].to_torch().double() - lp  # k3 = exp(d) - d - 1
        rows.append(torch.nn.functional.pad(spec.token_losses(lp, inputs) + 0.2 * (d.exp() - d - 1), (0, 2 - len(lp))))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    expected = aggregate_loss(torch.stack(rows), mask, "seq_mean_token_mean")
    assert float(loss.detach()) == pytest.approx(float(expected), abs=1e-6)


@pytest.mark.parametrize("mode", ["token_sum", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_minibatches_weighted_add_up_to_the_whole_step(mode: str) -> None:
    """Stream mode: two equal halves, each aggregated alone and weighted 1/2, give the whole
    batch's loss in the modes whose normaliser counts sequences (token_sum needs no weight)."""
    datums = [
        _datum([-1.0, -0.5, -2.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0], [0.0] * 3),
        _datum([-0.3, -0.2], [-1.0, -1.0], [1.0, 1.0], [0.0] * 2),
        _datum([-0.7, -0.1, -0.4, -0.9], [0.5] * 4, [0.0, 0.0, 1.0, 1.0], [0.0] * 4),
        _datum([-1.2], [2.0], [1.0], [0.0]),
    ]
    current = [
        torch.tensor([-0.9, -0.6, -1.5]),
        torch.tensor([-0.25, -0.3]),
        torch.tensor([-0.8, 0, -0.5, -1]),
        torch.tensor([-1.0]),
    ]
    whole, _ = PolicyObjective("ppo", aggregation=mode, norm_tokens=4).loss(datums, current)
    half = PolicyObjective("ppo", aggregation=mode, norm_tokens=4, minibatches=2)
    first, _ = half.loss(datums[:2], current[:2])
    second, _ = half.loss(datums[2:], current[2:])
    assert float(first + second) == pytest.approx(float(whole), rel=1e-9)
