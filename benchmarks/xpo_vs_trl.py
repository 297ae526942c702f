"""kitchen's XPO loss against TRL's own `XPOTrainer._compute_losses` on the same random per-token
logprobs: the largest |value difference| and |gradient difference| (with respect to the policy's
per-token logprobs of both completions) over `--seeds` float64 batches, with ties and both loss
types. TRL 1.16 (the test extra) no longer ships XPO; install TRL 1.9, its last release with
`trl.experimental.xpo`, beside the project and put it first on the path:

    pip install --no-deps --target /tmp/trl19 trl==1.9.0
    PYTHONPATH=/tmp/trl19:. .venv/bin/python benchmarks/xpo_vs_trl.py --seeds 5

`tests/rlhf/test_xpo_loss.py` checks the same formula against a closed-form oracle in the suite.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import torch

from train_core.preference.xpo import xpo_loss


def compare(seed: int, loss_type: str, pairs: int = 6, length: int = 7) -> tuple[float, float]:
    """(max |value diff|, max |grad diff|) of one random batch; a third of the pairs tie in score."""
    from trl.experimental.xpo.xpo_trainer import XPOTrainer

    generator = torch.Generator().manual_seed(seed)

    def tokens() -> torch.Tensor:
        mask = torch.rand(pairs, length, generator=generator, dtype=torch.float64) < 0.8
        return -torch.rand(pairs, length, generator=generator, dtype=torch.float64) * 3 * mask

    policy_y, policy_ref_y, reference_y, reference_ref_y = tokens(), tokens(), tokens(), tokens()
    scores_model = torch.randint(0, 3, (pairs,), generator=generator).double()
    scores_ref = torch.randint(0, 3, (pairs,), generator=generator).double()
    chosen = scores_model >= scores_ref  # TRL's chosen_mask
    beta, alpha = 0.1 + seed * 0.05, 1e-2 * (seed + 1)
    trainer = SimpleNamespace(args=SimpleNamespace(loss_type=loss_type), beta=beta, alpha=alpha)
    compute: Any = XPOTrainer._compute_losses  # on a stand-in trainer: it reads args.loss_type, beta, alpha
    leaves = [t.clone().requires_grad_(True) for t in (policy_y, policy_ref_y)]
    theirs, _, _ = compute(trainer, leaves[0], leaves[1], reference_ref_y, reference_y, chosen)
    theirs.backward()
    ours_leaves = [t.clone().requires_grad_(True) for t in (policy_y, policy_ref_y)]
    ours, _, _ = xpo_loss(
        ours_leaves[0].sum(1),
        ours_leaves[1].sum(1),
        reference_y.sum(1),
        reference_ref_y.sum(1),
        chosen,
        beta,
        alpha,
        loss_type,
    )
    ours.backward()
    grad = max(float((a.grad - b.grad).abs().max()) for a, b in zip(ours_leaves, leaves, strict=True))  # type: ignore[operator]
    return float((ours - theirs).detach().abs()), grad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    import trl

    print(f"TRL {trl.__version__}; {args.seeds} seeds, float64, 6 pairs of 7 tokens")
    print(f"{'loss_type':<10} {'max |value diff|':>18} {'max |grad diff|':>18}")
    for loss_type in ("sigmoid", "ipo"):
        diffs = [compare(seed, loss_type) for seed in range(args.seeds)]
        print(f"{loss_type:<10} {max(d[0] for d in diffs):>18.3g} {max(d[1] for d in diffs):>18.3g}")


if __name__ == "__main__":
    main()
