"""TRL 1.16's `GRPOConfig.loss_type` names that are `algorithm:` presets here, against TRL's own
`GRPOTrainer._compute_loss` on the same tensors: the preset's whole objective (its policy loss,
clip, ratio level, aggregation and KL term) in value and gradient with respect to the per-token
logprobs, in float64, over several seeds.

TRL's method runs on a stand-in trainer whose logprob pass returns the batch's per-token
logprobs; kitchen's side is the preset's `PolicyObjective.loss` on RL datums, the loss the
custom route runs (the built-in route equals it: `tests/train_core/rl/test_rl_policy_objective.py`).
The sampler's logprobs, advantages and reference logprobs are float32 numbers on both sides (a
datum holds float32). TRL is in the test extra (`trl==1.16.*`): this module imports it."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trl.trainer.grpo_trainer import GRPOTrainer

from kitchen.families.rl.algorithm_settings import AlgorithmSettings
from kitchen.families.rl.presets import ALGORITHM_PRESETS
from train_core.rl.policy_objective import REFERENCE_LOGPROBS
from train_core.types import Datum, ModelInput, TensorData

pytestmark = pytest.mark.slow  # importing TRL takes 10-50 s on 2 cores

TRL_LOSS_TYPES: dict[str, dict[str, Any]] = {
    "grpo": {"loss_type": "grpo", "epsilon_low": 0.2, "epsilon_high": 0.2, "beta": 0.04},
    "dr_grpo": {"loss_type": "dr_grpo", "epsilon_low": 0.2, "epsilon_high": 0.2},
    "dapo": {"loss_type": "dapo", "epsilon_low": 0.2, "epsilon_high": 0.28},
    "bnpo": {"loss_type": "bnpo", "epsilon_low": 0.2, "epsilon_high": 0.2},
    "cispo": {"loss_type": "cispo", "epsilon_low": 0.2, "epsilon_high": 5.0},
    "sapo": {"loss_type": "sapo", "epsilon_low": 0.2, "epsilon_high": 0.2},
    "vespo": {"loss_type": "vespo", "epsilon_low": 0.2, "epsilon_high": 0.2},
    "luspo": {"loss_type": "luspo", "epsilon_low": 3e-4, "epsilon_high": 4e-4, "importance_sampling_level": "sequence"},
    # GSPO is TRL's `grpo` with `importance_sampling_level="sequence"` (its documented GSPO setup)
    "gspo": {"loss_type": "grpo", "epsilon_low": 3e-4, "epsilon_high": 4e-4, "importance_sampling_level": "sequence"},
}
"""Each preset, and TRL's GRPOConfig that computes the same objective (`beta` 0 unless given)."""

LENGTHS = (5, 9, 3, 9, 7, 1)
WIDTH = 9  # also the run's max_tokens: dr_grpo's constant (TRL's max_completion_length)
SEEDS = (0, 1, 2)
TOLERANCE = 1e-12
FLOAT32_CONSTANTS = {"sapo": 1e-6}
"""TRL builds sapo's temperatures with `torch.where` of Python floats, a float32 tensor: 1.05
becomes 1.0499999523, a residue of ~1e-8 in value and gradient, not a different formula."""


def _case(seed: int, spread: float) -> dict[str, torch.Tensor]:
    """B rows of WIDTH completion tokens, the first LENGTHS[b] of each real; the current policy
    `spread` (in log space) away from the sampler, so some ratios clip and some do not."""
    generator = torch.Generator().manual_seed(seed)
    rows = len(LENGTHS)
    mask = torch.zeros(rows, WIDTH, dtype=torch.float64)
    for row, length in enumerate(LENGTHS):
        mask[row, :length] = 1.0
    old = (-torch.rand(rows, WIDTH, generator=generator) * 3).float().double()
    # near the sampler: kitchen's k3 clamps its value at 10, as verl does, where TRL's does not
    reference = (old + 0.3 * torch.randn(rows, WIDTH, generator=generator, dtype=torch.float64)).float().double()
    policy = old + spread * torch.randn(rows, WIDTH, generator=generator, dtype=torch.float64)
    advantages = torch.randn(rows, generator=generator).float().double()
    return {"mask": mask, "old": old, "reference": reference, "policy": policy, "advantages": advantages}


def trl_loss(
    keys: dict[str, Any],
    case: dict[str, torch.Tensor],
    policy: torch.Tensor,
    entropies: torch.Tensor | None = None,
    top_entropy_quantile: float = 1.0,
) -> torch.Tensor:
    """TRL 1.16's `GRPOTrainer._compute_loss` (one process, no accumulation, train mode), its
    policy's per-token entropies `entropies` (default 0)."""
    rows = policy.shape[0]
    entropy = torch.zeros_like(policy) if entropies is None else entropies
    trainer = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (policy, entropy, None),
        get_gamma_weights=GRPOTrainer.get_gamma_weights,  # a static method of TRL's
        top_entropy_quantile=top_entropy_quantile,
        off_policy_mask_threshold=None,
        importance_sampling_level=keys.get("importance_sampling_level", "token"),
        beta=keys.get("beta", 0.0),
        loss_type=keys["loss_type"],
        epsilon_low=keys["epsilon_low"],
        epsilon_high=keys["epsilon_high"],
        args=SimpleNamespace(
            use_bias_correction_kl=False,
            delta=keys.get("delta"),
            sapo_temperature_pos=1.0,
            sapo_temperature_neg=1.05,
            vespo_k_pos=2.0,
            vespo_lambda_pos=3.0,
            vespo_k_neg=3.0,
            vespo_lambda_neg=2.0,
            steps_per_generation=1,
        ),
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        max_completion_length=WIDTH,
        accelerator=SimpleNamespace(
            num_processes=1,
            gather=lambda t: t,
            gather_for_metrics=lambda t: t,
            reduce=lambda t, reduction: t,
            pad_across_processes=lambda t, dim, pad_index: t,
        ),
        aux_loss_enabled=False,
        _entropy_bonus_enabled=False,
        _metrics=defaultdict(lambda: defaultdict(list)),
    )
    inputs = {
        "prompt_ids": torch.zeros(rows, 1, dtype=torch.long),
        "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
        "completion_ids": torch.zeros(rows, WIDTH, dtype=torch.long),
        "completion_mask": case["mask"].long(),
        "advantages": case["advantages"],
        "old_per_token_logps": case["old"],
        "ref_per_token_logps": case["reference"],
        "num_items_in_batch": case["mask"].sum(),
    }
    high_entropy_mask: Any = GRPOTrainer.get_high_entropy_mask
    trainer.get_high_entropy_mask = lambda *args: high_entropy_mask(trainer, *args)
    compute_loss: Any = GRPOTrainer._compute_loss  # on a stand-in trainer (module doc)
    return compute_loss(trainer, None, inputs)


def kitchen_loss(
    preset: str,
    case: dict[str, torch.Tensor],
    policy: torch.Tensor,
    entropies: torch.Tensor | None = None,
    **overrides: object,
) -> torch.Tensor:
    """The preset's `PolicyObjective.loss` (with `overrides` of its keys) on one RL datum per row,
    with the rows of `entropies` as its per-token entropies when given."""
    settings = AlgorithmSettings.model_validate({**ALGORITHM_PRESETS[preset].settings, **overrides})
    objective = settings.policy_objective(max_tokens=WIDTH)
    data = []
    for row in range(policy.shape[0]):
        mask = case["mask"][row]
        data.append(
            Datum(
                ModelInput.from_ints([0] * WIDTH),
                {
                    "target_tokens": TensorData.from_list([0] * WIDTH, "int64"),
                    "logprobs": TensorData.from_torch(case["old"][row]),
                    "advantages": TensorData.from_torch(case["advantages"][row] * mask),
                    "mask": TensorData.from_torch(mask),
                    REFERENCE_LOGPROBS: TensorData.from_torch(case["reference"][row]),
                },
            )
        )
    loss, _ = objective.loss(data, list(policy), None if entropies is None else list(entropies))
    return loss


@pytest.mark.parametrize("spread", [0.3, 1e-4])
@pytest.mark.parametrize("preset", sorted(TRL_LOSS_TYPES))
def test_preset_equals_trls_loss_type(preset: str, spread: float) -> None:
    """`spread` 0.3 clips many tokens under every preset; 1e-4 keeps GSPO's and LUSPO's narrow
    band partly unclipped."""
    for seed in SEEDS:
        case = _case(seed, spread)
        ours_in = case["policy"].clone().requires_grad_(True)
        theirs_in = case["policy"].clone().requires_grad_(True)
        ours, theirs = kitchen_loss(preset, case, ours_in), trl_loss(TRL_LOSS_TYPES[preset], case, theirs_in)
        ours.backward()
        theirs.backward()
        assert ours_in.grad is not None and theirs_in.grad is not None
        masked = case["mask"].bool()
        tolerance = FLOAT32_CONSTANTS.get(preset, TOLERANCE)
        value, reference = float(ours.detach()), float(theirs.detach())
        assert abs(value - reference) <= tolerance * max(1.0, abs(reference)), (value, reference)
        assert float((ours_in.grad - theirs_in.grad)[masked].abs().max()) <= tolerance
        assert float(theirs_in.grad[~masked].abs().max()) == 0.0 == float(ours_in.grad[~masked].abs().max())
        assert float(theirs_in.grad.abs().max()) > 0  # the loss reaches the logprobs


@pytest.mark.parametrize("preset", ["bnpo", "dapo", "grpo"])
def test_trls_two_sided_clip_delta_is_dual_clip(preset: str) -> None:
    """TRL's `delta` (INTELLECT-2's two-sided clip: the ratio capped at delta) is kitchen's
    `algorithm.clip_ratio_c` (dual clip) wherever delta > 1 + epsilon_high, as TRL recommends:
    for a positive advantage the clip at 1 + epsilon_high binds first, for a negative one both
    cap the loss at `-delta * A` with no gradient. `spread` 1.0 puts some ratios above 3."""
    keys = {**TRL_LOSS_TYPES[preset], "delta": 3.0}
    capped = 0
    for seed in SEEDS:
        case = _case(seed, 1.0)
        ours_in = case["policy"].clone().requires_grad_(True)
        theirs_in = case["policy"].clone().requires_grad_(True)
        ours = kitchen_loss(preset, case, ours_in, clip_ratio_c=3.0)
        theirs = trl_loss(keys, case, theirs_in)
        ours.backward()
        theirs.backward()
        assert ours_in.grad is not None and theirs_in.grad is not None
        value, reference = float(ours.detach()), float(theirs.detach())
        assert abs(value - reference) <= TOLERANCE * max(1.0, abs(reference)), (value, reference)
        assert float((ours_in.grad - theirs_in.grad)[case["mask"].bool()].abs().max()) <= TOLERANCE
        capped += abs(float(trl_loss(TRL_LOSS_TYPES[preset], case, case["policy"])) - reference) > 1e-6
    assert capped > 0  # the cap changed the loss on some batch: it was tested


def test_every_trl_name_with_a_preset_is_checked() -> None:
    """Every TRL loss_type name is a preset, and each is in the table above."""
    trl_names = {"grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"}
    assert trl_names <= set(ALGORITHM_PRESETS) and trl_names == set(TRL_LOSS_TYPES) - {"gspo"}


def _entropies(seed: int, ties: bool) -> torch.Tensor:
    """Per-token entropies in [0, 3), float32 as the local backend computes them (TRL takes the
    quantile in float32: `train_core.rl.entropy_mask`); with `ties`, rounded to 0.5 so that many
    tokens share the quantile's value; padding positions hold large values that must not count."""
    generator = torch.Generator().manual_seed(seed + 100)
    entropy = torch.rand(len(LENGTHS), WIDTH, generator=generator, dtype=torch.float64) * 3
    entropy = (entropy * 2).floor() / 2 if ties else entropy
    mask = _case(seed, 0.3)["mask"]
    return torch.where(mask.bool(), entropy, torch.full_like(entropy, 50.0)).float()


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("rho", [0.0, 0.2, 0.5, 0.8, 1.0])
def test_high_entropy_mask_equals_trls(rho: float, ties: bool) -> None:
    """`train_core.rl.entropy_mask.high_entropy_mask` is TRL's `get_high_entropy_mask` at
    threshold `1 - rho`, bit for bit: ties at the quantile, padding that must not count, an empty
    batch."""
    from train_core.rl.entropy_mask import high_entropy_mask

    trainer: Any = SimpleNamespace(accelerator=SimpleNamespace(pad_across_processes=lambda t, dim, pad_index: t))
    trainer.accelerator.gather = lambda t: t
    for seed in SEEDS:
        entropy, mask = _entropies(seed, ties), _case(seed, 0.3)["mask"]
        theirs = GRPOTrainer.get_high_entropy_mask(trainer, entropy, mask, 1 - rho)
        ours = torch.stack(high_entropy_mask(list(entropy), list(mask), rho))
        assert torch.equal(ours, theirs)
        kept = int(ours.sum())
        assert 0 < kept <= int(mask.sum()) and not ours[~mask.bool()].any()
    empty = torch.zeros(len(LENGTHS), WIDTH, dtype=torch.float64)
    theirs = GRPOTrainer.get_high_entropy_mask(trainer, _entropies(0, ties), empty, 1 - rho)
    assert torch.equal(torch.stack(high_entropy_mask(list(_entropies(0, ties)), list(empty), rho)), theirs)
    assert not theirs.any()


@pytest.mark.parametrize("rho", [0.0, 0.2, 0.5])
@pytest.mark.parametrize("preset", ["grpo", "dapo", "dr_grpo"])
def test_top_entropy_quantile_equals_trls(preset: str, rho: float) -> None:
    """The whole objective with `algorithm.top_entropy_quantile` against TRL's `_compute_loss`
    with `top_entropy_quantile` (grpo's KL term included, which neither masks), value and
    gradient."""
    for seed in SEEDS:
        case = _case(seed, 0.3)
        entropy = _entropies(seed, ties=seed == 2)
        ours_in = case["policy"].clone().requires_grad_(True)
        theirs_in = case["policy"].clone().requires_grad_(True)
        ours = kitchen_loss(preset, case, ours_in, entropy, top_entropy_quantile=rho)
        theirs = trl_loss(TRL_LOSS_TYPES[preset], case, theirs_in, entropy, rho)
        ours.backward()
        theirs.backward()
        assert ours_in.grad is not None and theirs_in.grad is not None
        value, reference = float(ours.detach()), float(theirs.detach())
        assert abs(value - reference) <= TOLERANCE * max(1.0, abs(reference)), (value, reference)
        assert float((ours_in.grad - theirs_in.grad).abs().max()) <= TOLERANCE
        unmasked = float(trl_loss(TRL_LOSS_TYPES[preset], case, case["policy"]))
        assert abs(unmasked - reference) > 1e-9  # the mask changed the loss: it was tested


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.integers(1, 5),
    width=st.integers(1, 12),
    rho=st.floats(0.0, 1.0),
    levels=st.integers(1, 8),
    seed=st.integers(0, 2**20),
    keep_rate=st.floats(0.0, 1.0),
)
def test_any_high_entropy_mask_equals_trls(
    rows: int, width: int, rho: float, levels: int, seed: int, keep_rate: float
) -> None:
    """Property: on any float32 entropies (`levels` distinct values, so ties are common) and any
    padding mask, the mask is TRL's, and keeps a top-rho share of the action tokens: at least
    one when any exists, and no padding."""
    from train_core.rl.entropy_mask import high_entropy_mask

    generator = torch.Generator().manual_seed(seed)
    entropy = (torch.randint(0, levels, (rows, width), generator=generator) * 0.37).float()
    mask = (torch.rand(rows, width, generator=generator) < keep_rate).float()
    trainer: Any = SimpleNamespace(accelerator=SimpleNamespace(pad_across_processes=lambda t, dim, pad_index: t))
    trainer.accelerator.gather = lambda t: t
    theirs = GRPOTrainer.get_high_entropy_mask(trainer, entropy, mask, 1 - rho)
    ours = torch.stack(high_entropy_mask(list(entropy), list(mask), rho))
    assert torch.equal(ours, theirs)
    assert not ours[mask == 0].any()
    actions = int(mask.sum())
    assert (int(ours.sum()) >= 1) == (actions > 0)
    if actions:
        assert int(ours.sum()) >= rho * actions - 1  # at least the top-rho share (ties only add)
