"""kitchen's preference losses against TRL 1.16's `DPOTrainer._compute_loss` on the same random
per-token logprobs (`tests/rlhf/trl_dpo_harness.py`): for each name and option, the largest
|value difference| and |gradient difference| (gradients with respect to the per-token logprobs)
over `--seeds` float64 batches of 4 pairs. The parity tests assert these; this prints the table.

    PYTHONPATH=. .venv/bin/python benchmarks/trl_parity.py --seeds 5
"""

from __future__ import annotations

import argparse

import torch

from tests.rlhf.trl_dpo_harness import DPOSettings, compare, random_case
from train_core.preference.losses import TRL_DPO_LOSS_TYPES

LENGTHS = (3, 8, 5, 6, 2, 7, 8, 4)
SMOOTHING = {"exo_pair": 1e-3, "robust": 0.2, "aot": 0.1, "aot_unpaired": 0.1}


def rows() -> list[tuple[str, DPOSettings, torch.dtype]]:
    """Each name alone, then the options TRL's DPOConfig adds (f-divergence, LD-DPO, WPO, sums)."""
    table = [
        (name, DPOSettings(loss_type=(name,), label_smoothing=SMOOTHING.get(name, 0.0)), torch.float64)
        for name in TRL_DPO_LOSS_TYPES
    ]
    table += [
        (f"sigmoid, f_divergence_type={f}", DPOSettings(f_divergence_type=f), torch.float64)
        for f in ("forward_kl", "js_divergence")
    ]
    alpha = DPOSettings(f_divergence_type="alpha_divergence", f_alpha_divergence_coef=0.3)
    table.append(("sigmoid, alpha_divergence 0.3 (float32)", alpha, torch.float32))
    table.append(("sigmoid, ld_alpha=0.5", DPOSettings(ld_alpha=0.5), torch.float64))
    table.append(("sigmoid, use_weighting", DPOSettings(use_weighting=True), torch.float64))
    mpo = DPOSettings(loss_type=("sigmoid", "bco_pair", "sft"), loss_weights=(0.8, 0.2, 1.0))
    table.append(("[sigmoid, bco_pair, sft] x [0.8, 0.2, 1.0] (MPO)", mpo, torch.float64))
    table.append(
        (
            "[sigmoid, sft] x [1, 0.4] (rpo_alpha 0.4)",
            DPOSettings(loss_type=("sigmoid", "sft"), loss_weights=(1.0, 0.4)),
            torch.float64,
        )
    )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    print(f"| name | max abs value diff ({args.seeds} seeds) | max abs grad diff |")
    print("|---|---|---|")
    for name, settings, dtype in rows():
        value, grad = 0.0, 0.0
        for seed in range(args.seeds):
            _, _, value_diff, grad_diff = compare(settings, random_case(seed, LENGTHS, dtype=dtype))
            value, grad = max(value, value_diff), max(grad, grad_diff)
        print(f"| {name} | {value:.1e} | {grad:.1e} |")


if __name__ == "__main__":
    main()
