"""kitchen's Nash-MD loss against TRL's own `NashMDTrainer._compute_losses` on the same random
per-token logprobs: the largest |value difference| and |gradient difference| (with respect to the
policy's per-token logprobs) over `--seeds` float64 batches, with padding, ties (probability 0.5)
and sure wins and losses. TRL 1.16 (the test extra) no longer ships Nash-MD; install TRL 1.9, its
last release with `trl.experimental.nash_md`, beside the project and put it first on the path:

    pip install --no-deps --target /tmp/trl19 trl==1.9.0
    PYTHONPATH=/tmp/trl19:. .venv/bin/python benchmarks/nash_md_vs_trl.py --seeds 5

`tests/rlhf/test_nash_md_loss.py` checks the same formula against a closed-form oracle in the suite.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import torch

from train_core.preference.nash_md import nash_md_loss


def compare(seed: int, prompts: int = 6, length: int = 7) -> tuple[float, float]:
    """(max |value diff|, max |grad diff|) of one random batch; a third of the probabilities are
    0.5 (a tie), others 0 or 1 or in between."""
    from trl.experimental.nash_md.nash_md_trainer import NashMDTrainer

    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(prompts, length, generator=generator) < 0.8
    policy = -torch.rand(prompts, length, generator=generator, dtype=torch.float64) * 3 * mask
    reference = -torch.rand(prompts, length, generator=generator, dtype=torch.float64) * 3 * mask
    probability = torch.rand(prompts, generator=generator, dtype=torch.float64)
    probability[0::3], probability[1] = 0.5, 1.0
    probability[-1] = 0.0
    beta = 0.1 + seed * 0.05
    trainer = SimpleNamespace(beta=beta)
    compute: Any = NashMDTrainer._compute_losses  # on a stand-in trainer: it reads beta only
    theirs_leaf = policy.clone().requires_grad_(True)
    # TRL's `_compute_logprobs` zeroes padding with `masked_fill` before the loss (no gradient there)
    theirs, _, _ = compute(trainer, theirs_leaf.masked_fill(~mask, 0.0), reference, probability)
    theirs.backward()
    ours_leaf = policy.clone().requires_grad_(True)
    ours, _, _ = nash_md_loss(ours_leaf, reference, mask, probability, beta)
    ours.backward()
    grad = float((ours_leaf.grad - theirs_leaf.grad).abs().max())  # type: ignore[operator]
    return float((ours - theirs).detach().abs()), grad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    import trl

    diffs = [compare(seed) for seed in range(args.seeds)]
    print(f"TRL {trl.__version__}; {args.seeds} seeds, float64, 6 prompts of 7 tokens (padded)")
    print(f"{'max |value diff|':>18} {'max |grad diff|':>18}")
    print(f"{max(d[0] for d in diffs):>18.3g} {max(d[1] for d in diffs):>18.3g}")


if __name__ == "__main__":
    main()
