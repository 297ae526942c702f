"""The Tinker losses against their formulas, written out token by token in plain Python."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from train_core.errors import InvalidInputError
from train_core.losses import LOSS_SPECS, get_loss_fn, is_policy_gradient, rl_loss_names

_finite = st.floats(min_value=-3.0, max_value=3.0, allow_nan=False, allow_infinity=False)
_logprob = st.floats(min_value=-6.0, max_value=0.0, allow_nan=False, allow_infinity=False)


@st.composite
def _rl_tokens(draw: st.DrawFn) -> tuple[list[float], list[float], list[float]]:
    """Current logprobs, sampling logprobs and advantages for 1..12 tokens."""
    n = draw(st.integers(min_value=1, max_value=12))
    lp = draw(st.lists(_logprob, min_size=n, max_size=n))
    q = draw(st.lists(_logprob, min_size=n, max_size=n))
    adv = draw(st.lists(_finite, min_size=n, max_size=n))
    return lp, q, adv


def _loss_and_grad(
    name: str,
    lp: list[float],
    inputs: dict[str, list[float]],
    config: dict[str, float] | None = None,
    lengths_D: list[int] | None = None,
) -> tuple[float, list[float]]:
    """Run the named loss in float64 and return its value and d(loss)/d(logprobs)."""
    lp_T = torch.tensor(lp, dtype=torch.float64, requires_grad=True)
    tensors = {key: torch.tensor(values, dtype=torch.float64) for key, values in inputs.items()}
    tensors["target_tokens"] = torch.zeros(len(lp), dtype=torch.int64)
    loss, metrics = get_loss_fn(name)(lp_T, tensors, config, lengths_D)
    loss.backward()
    assert lp_T.grad is not None
    assert metrics["loss:sum"] == pytest.approx(float(loss.detach()))
    return float(loss.detach()), lp_T.grad.tolist()


def _clip(x: float, low: float, high: float) -> float:
    return min(max(x, low), high)


@given(
    st.integers(min_value=1, max_value=12).flatmap(
        lambda n: st.tuples(st.lists(_logprob, min_size=n, max_size=n), st.lists(_finite, min_size=n, max_size=n))
    )
)
def test_cross_entropy_is_weighted_negative_logprob_sum(lp_and_weights: tuple[list[float], list[float]]) -> None:
    lp, weights = lp_and_weights
    loss, grad = _loss_and_grad("cross_entropy", lp, {"weights": weights})
    assert loss == pytest.approx(-sum(x * w for x, w in zip(lp, weights, strict=True)), abs=1e-9)
    assert grad == pytest.approx([-w for w in weights])


@given(_rl_tokens())
def test_importance_sampling_matches_formula(tokens: tuple[list[float], list[float], list[float]]) -> None:
    lp, q, adv = tokens
    ratios = [math.exp(x - y) for x, y in zip(lp, q, strict=True)]
    loss, grad = _loss_and_grad("importance_sampling", lp, {"logprobs": q, "advantages": adv})
    assert loss == pytest.approx(-sum(r * a for r, a in zip(ratios, adv, strict=True)), rel=1e-9, abs=1e-9)
    # d(-r*A)/d(lp) = -r*A because d(r)/d(lp) = r.
    assert grad == pytest.approx([-r * a for r, a in zip(ratios, adv, strict=True)], rel=1e-9, abs=1e-9)


@given(_rl_tokens(), st.floats(0.5, 0.95), st.floats(1.05, 2.0))
def test_ppo_matches_formula(tokens: tuple[list[float], list[float], list[float]], low: float, high: float) -> None:
    lp, q, adv = tokens
    config = {"clip_low_threshold": low, "clip_high_threshold": high}
    loss, grad = _loss_and_grad("ppo", lp, {"logprobs": q, "advantages": adv}, config)
    expected_loss, expected_grad = 0.0, []
    for x, y, a in zip(lp, q, adv, strict=True):
        r = math.exp(x - y)
        unclipped, clipped = r * a, _clip(r, low, high) * a
        expected_loss -= min(unclipped, clipped)
        # The unclipped term carries the gradient wherever it is the smaller one (ties: either).
        expected_grad.append(-r * a if unclipped <= clipped else 0.0)
    assert loss == pytest.approx(expected_loss, rel=1e-9, abs=1e-9)
    for g, e, x, y in zip(grad, expected_grad, lp, q, strict=True):
        r = math.exp(x - y)
        if not (math.isclose(r, low) or math.isclose(r, high)):
            assert g == pytest.approx(e, rel=1e-9, abs=1e-9)


@given(_rl_tokens(), st.floats(0.0, 0.95), st.floats(1.05, 5.0))
def test_cispo_matches_formula(tokens: tuple[list[float], list[float], list[float]], low: float, high: float) -> None:
    lp, q, adv = tokens
    config = {"clip_low_threshold": low, "clip_high_threshold": high}
    loss, grad = _loss_and_grad("cispo", lp, {"logprobs": q, "advantages": adv}, config)
    coefficients = [_clip(math.exp(x - y), low, high) for x, y in zip(lp, q, strict=True)]
    expected_loss = -sum(c * x * a for c, x, a in zip(coefficients, lp, adv, strict=True))
    assert loss == pytest.approx(expected_loss, rel=1e-9, abs=1e-9)
    # The coefficient is stop-gradient: only lp itself is differentiated.
    assert grad == pytest.approx([-c * a for c, a in zip(coefficients, adv, strict=True)], rel=1e-9, abs=1e-9)


@given(_rl_tokens(), st.floats(0.0, 2.0))
def test_dro_matches_formula(tokens: tuple[list[float], list[float], list[float]], beta: float) -> None:
    lp, q, adv = tokens
    loss, grad = _loss_and_grad("dro", lp, {"logprobs": q, "advantages": adv}, {"beta": beta})
    expected = -sum(x * a - 0.5 * beta * (x - y) ** 2 for x, y, a in zip(lp, q, adv, strict=True))
    assert loss == pytest.approx(expected, rel=1e-9, abs=1e-9)
    expected_grad = [-(a - beta * (x - y)) for x, y, a in zip(lp, q, adv, strict=True)]
    assert grad == pytest.approx(expected_grad, rel=1e-9, abs=1e-9)


@settings(max_examples=30)
@given(st.sampled_from(sorted(LOSS_SPECS)), _rl_tokens(), _rl_tokens())
def test_loss_of_concatenated_datums_is_the_sum_of_their_losses(
    name: str,
    first: tuple[list[float], list[float], list[float]],
    second: tuple[list[float], list[float], list[float]],
) -> None:
    """Losses are sums, so a batch's loss is the sum of its datums' losses (no hidden mean)."""
    config = {"beta": 0.3} if name == "dro" else None

    def inputs(tokens: tuple[list[float], list[float], list[float]]) -> dict[str, list[float]]:
        _, q, adv = tokens
        if name == "cross_entropy":
            return {"weights": adv}
        if name in ("gspo", "vespo"):
            return {"logprobs": q, "advantages": adv, "sequence_ratio_mask": [1.0] * len(q)}
        if name == "decoupled_ppo":
            return {"logprobs": q, "proximal_logprobs": [x - 0.1 for x in q], "advantages": adv}
        return {"logprobs": q, "advantages": adv}

    joined = {key: inputs(first)[key] + inputs(second)[key] for key in inputs(first)}
    lengths_D = [len(first[0]), len(second[0])]
    loss_joined, _ = _loss_and_grad(name, first[0] + second[0], joined, config, lengths_D)
    loss_first, _ = _loss_and_grad(name, first[0], inputs(first), config)
    loss_second, _ = _loss_and_grad(name, second[0], inputs(second), config)
    assert loss_joined == pytest.approx(loss_first + loss_second, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(
    ("ratio", "advantage", "loss_per_token", "grad_per_token"),
    [
        (1.5, 1.0, -1.2, 0.0),  # positive advantage, ratio above 1.2: clipped, no gradient
        (1.1, 1.0, -1.1, -1.1),  # inside the band: plain ratio * A
        (0.5, 1.0, -0.5, -0.5),  # positive advantage, ratio below 0.8: the unclipped term is smaller
        (0.5, -1.0, 0.8, 0.0),  # negative advantage, ratio below 0.8: clipped, no gradient
        (1.5, -1.0, 1.5, 1.5),  # negative advantage, ratio above 1.2: unclipped, keeps its gradient
    ],
)
def test_ppo_clipping_boundaries_with_default_thresholds(
    ratio: float, advantage: float, loss_per_token: float, grad_per_token: float
) -> None:
    q = -1.0
    loss, grad = _loss_and_grad("ppo", [q + math.log(ratio)], {"logprobs": [q], "advantages": [advantage]})
    assert loss == pytest.approx(loss_per_token)
    assert grad == pytest.approx([grad_per_token])


@pytest.mark.parametrize(("ratio", "coefficient"), [(0.01, 0.01), (2.0, 2.0), (10.0, 4.0)])
def test_cispo_default_clip_caps_the_ratio_at_four_and_has_no_floor(ratio: float, coefficient: float) -> None:
    q, advantage = -2.0, 1.5
    lp = q + math.log(ratio)
    loss, grad = _loss_and_grad("cispo", [lp], {"logprobs": [q], "advantages": [advantage]})
    assert loss == pytest.approx(-coefficient * lp * advantage)
    assert grad == pytest.approx([-coefficient * advantage])


def test_required_inputs_per_loss() -> None:
    assert get_loss_fn("cross_entropy").required_inputs == ("target_tokens", "weights")
    for name in ("importance_sampling", "ppo", "cispo", "dro"):
        assert get_loss_fn(name).required_inputs == ("target_tokens", "logprobs", "advantages")
    assert get_loss_fn("gspo").required_inputs == ("target_tokens", "logprobs", "advantages", "sequence_ratio_mask")
    assert get_loss_fn("decoupled_ppo").required_inputs == (
        "target_tokens",
        "logprobs",
        "proximal_logprobs",
        "advantages",
    )


def test_unknown_loss_name_is_an_error_listing_known_losses() -> None:
    with pytest.raises(InvalidInputError, match=r"unknown loss_fn 'ppo2'.*cross_entropy"):
        get_loss_fn("ppo2")


def test_missing_input_is_an_error_naming_the_key() -> None:
    lp_T = torch.zeros(3)
    inputs = {"target_tokens": torch.zeros(3, dtype=torch.int64), "logprobs": torch.zeros(3)}
    with pytest.raises(InvalidInputError, match=r"loss 'ppo' needs loss_fn_inputs\['advantages'\]"):
        get_loss_fn("ppo")(lp_T, inputs)


def test_unknown_config_key_is_an_error() -> None:
    with pytest.raises(InvalidInputError, match=r"does not accept loss_fn_config keys \['clip_epsilon'\]"):
        get_loss_fn("ppo").resolve_config({"clip_epsilon": 0.2})
    with pytest.raises(InvalidInputError, match="does not accept"):
        get_loss_fn("cross_entropy").resolve_config({"beta": 0.1})


def test_dro_requires_beta() -> None:
    with pytest.raises(InvalidInputError, match=r"loss 'dro' needs loss_fn_config\['beta'\]"):
        get_loss_fn("dro").resolve_config(None)
    assert get_loss_fn("dro").resolve_config({"beta": 0.05}) == {"beta": 0.05}


def test_config_defaults_are_filled_in_and_overridable() -> None:
    ppo = get_loss_fn("ppo")
    assert ppo.resolve_config(None) == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2, "clip_ratio_c": math.inf}
    assert ppo.resolve_config({"clip_high_threshold": 1.28}) == {
        "clip_low_threshold": 0.8,
        "clip_high_threshold": 1.28,
        "clip_ratio_c": math.inf,
    }
    assert get_loss_fn("cispo").resolve_config(None) == {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}


@settings(max_examples=60)
@given(_rl_tokens(), st.data(), st.floats(0.5, 0.999), st.floats(1.001, 2.0))
def test_gspo_matches_formula(
    tokens: tuple[list[float], list[float], list[float]], data: st.DataObject, low: float, high: float
) -> None:
    """One sequence: s = geometric mean of the ratios over the masked tokens; every token takes
    s's value, clipped at sequence level, and its own logprob's gradient (GSPO-token)."""
    lp, q, adv = tokens
    mask = data.draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=len(lp), max_size=len(lp)))
    config = {"clip_low_threshold": low, "clip_high_threshold": high}
    inputs = {"logprobs": q, "advantages": adv, "sequence_ratio_mask": mask}
    loss, grad = _loss_and_grad("gspo", lp, inputs, config)
    masked = [x - y for x, y, m in zip(lp, q, mask, strict=True) if m]
    s = math.exp(sum(masked) / len(masked)) if masked else 1.0
    unclipped_smaller = [s * a <= _clip(s, low, high) * a for a in adv]
    expected_loss = -sum(min(s * a, _clip(s, low, high) * a) for a in adv)
    assert loss == pytest.approx(expected_loss, rel=1e-9, abs=1e-9)
    if not (math.isclose(s, low) or math.isclose(s, high)):
        expected_grad = [-s * a if smaller else 0.0 for a, smaller in zip(adv, unclipped_smaller, strict=True)]
        assert grad == pytest.approx(expected_grad, rel=1e-9, abs=1e-9)


def test_gspo_clips_whole_sequences_where_ppo_clips_tokens() -> None:
    """Ratios 2 and 0.5 on the action tokens: their geometric mean is 1, inside the band, so no
    token is clipped and both keep their gradient; ppo would clip the first token."""
    q = [-1.0, -1.0, -1.0]
    lp = [-1.0, -1.0 + math.log(2.0), -1.0 + math.log(0.5)]
    inputs = {"logprobs": q, "advantages": [0.0, 1.0, 1.0], "sequence_ratio_mask": [0.0, 1.0, 1.0]}
    loss, grad = _loss_and_grad("gspo", lp, inputs)
    assert loss == pytest.approx(-2.0) and grad == pytest.approx([0.0, -1.0, -1.0])
    _, ppo_grad = _loss_and_grad("ppo", lp, {"logprobs": q, "advantages": [0.0, 1.0, 1.0]})
    assert ppo_grad == pytest.approx([0.0, 0.0, -0.5])


def test_gspo_takes_each_datums_own_sequence_ratio() -> None:
    """Two datums, one drifted (ratio 1.5) and one not: split by lengths, the first is clipped and
    the second is not; taken as one sequence, both would share one ratio (sqrt(1.5), clipped)."""
    q = [-1.0, -1.0]
    lp = [-1.0 + math.log(1.5), -1.0]
    inputs = {"logprobs": q, "advantages": [1.0, 1.0], "sequence_ratio_mask": [1.0, 1.0]}
    config = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    loss, grad = _loss_and_grad("gspo", lp, inputs, config, lengths_D=[1, 1])
    assert loss == pytest.approx(-(1.2 + 1.0)) and grad == pytest.approx([0.0, -1.0])
    joined, _ = _loss_and_grad("gspo", lp, inputs, config)
    assert joined == pytest.approx(-2 * 1.2)


def test_gspo_defaults_are_the_papers_clip_range() -> None:
    assert get_loss_fn("gspo").resolve_config(None) == {
        "clip_low_threshold": pytest.approx(1 - 3e-4),
        "clip_high_threshold": pytest.approx(1 + 4e-4),
    }


def test_the_rl_loss_list_derives_from_the_one_table() -> None:
    """A property of the table, not its exact list: RL offers exactly the losses that read
    advantages and only what its datums carry."""
    names = rl_loss_names()
    assert names and set(names) <= set(LOSS_SPECS)
    for name, spec in LOSS_SPECS.items():
        assert (name in names) == ("advantages" in spec.input_keys and is_policy_gradient(spec))
    assert "cross_entropy" not in names


def test_sapo_on_policy_is_the_policy_gradient_and_fades_off_policy() -> None:
    """At ratio 1 SAPO's token loss is `-2 A / tau` and its gradient the plain policy gradient
    `-A` (the gate's slope there is tau / 4, times its 4 / tau); far from 1 the gradient fades."""
    spec = get_loss_fn("sapo")
    advantages = torch.tensor([1.5, -2.0], dtype=torch.float64)
    sampled = torch.tensor([-1.0, -0.5], dtype=torch.float64)
    logprobs = sampled.clone().requires_grad_(True)
    loss = spec.formula(logprobs, sampled, advantages, temperature_pos=1.0, temperature_neg=1.05)
    torch.testing.assert_close(loss.detach(), torch.tensor([-3.0, 4.0 / 1.05], dtype=torch.float64))
    loss.sum().backward()
    assert logprobs.grad is not None
    torch.testing.assert_close(logprobs.grad, -advantages)
    far = (sampled + 3.0).requires_grad_(True)
    spec.formula(far, sampled, advantages, temperature_pos=1.0, temperature_neg=1.05).sum().backward()
    assert far.grad is not None and bool((far.grad.abs() < 0.1 * advantages.abs()).all())


def test_vespo_on_policy_is_the_policy_gradient_and_its_weight_is_a_gamma_function() -> None:
    """At w = 1 VESPO's weight is 1 (the plain policy gradient `-A`); off-policy it is
    `exp(lambda + k log w - lambda w)` with the advantage sign's k and lambda, and no gradient."""
    spec = get_loss_fn("vespo")
    sampled = torch.tensor([-1.0, -0.5, -2.0], dtype=torch.float64)
    mask = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)
    for advantage, (k, lam) in ((1.5, (2.0, 3.0)), (-2.0, (3.0, 2.0))):
        advantages = advantage * mask
        on = sampled.clone().requires_grad_(True)
        spec.formula(on, sampled, advantages, mask).sum().backward()
        assert on.grad is not None
        torch.testing.assert_close(on.grad, -advantages)
        off = (sampled + torch.tensor([0.2, 0.3, 5.0], dtype=torch.float64)).requires_grad_(True)
        spec.formula(off, sampled, advantages, mask).sum().backward()
        log_w = 0.5  # the masked token's drift does not count
        phi = math.exp(lam + k * log_w - lam * math.exp(log_w))
        assert off.grad is not None
        torch.testing.assert_close(off.grad, -phi * advantages)
