"""Every preference loss whose name TRL also uses, against TRL's own code on the same tensors:
loss value and gradient with respect to the per-token logprobs (or, for ORPO, the logits).

TRL computes its DPO-family losses (`sigmoid`, `hinge`, `ipo`, `robust`) inside
`DPOTrainer._compute_loss`, so that method runs here on a minimal trainer object whose model
returns the test's per-token logprobs (a trainer needs a real model, optimizer and dataset to be
built; nothing else of it is used). `cdpo` (TRL's label-smoothed sigmoid) and `simpo` come from
`CPOTrainer.cpo_loss`, `orpo` from `ORPOTrainer.odds_ratio_loss` plus the chosen-token cross
entropy its `concatenated_forward` adds. Skipped when TRL (the `bench` extra) is not installed."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from train_core.preference.losses import PairBatch, PreferenceLossParams, preference_loss

trl_dpo = pytest.importorskip("trl.trainer.dpo_trainer", reason="TRL is not installed (pip install -e '.[bench]')")
trl_cpo = pytest.importorskip("trl.experimental.cpo.cpo_trainer", reason="TRL's CPO trainer is not installed")
trl_orpo = pytest.importorskip("trl.experimental.orpo.orpo_trainer", reason="TRL's ORPO trainer is not installed")

pytestmark = pytest.mark.slow  # importing TRL takes 10-50 s on 2 cores

PAIRS, LENGTH = 4, 9
BETA, EPS = 0.3, 0.2


def _completion_mask() -> torch.Tensor:
    """[chosen_0..P-1, rejected_0..P-1] rows (TRL's order); completions of different lengths
    after a prompt, so length normalisation matters. Position 0 is always prompt."""
    lengths = [3, 8, 5, 6, 2, 7, 8, 4]
    mask = torch.zeros(2 * PAIRS, LENGTH)
    for row, n in enumerate(lengths):
        mask[row, LENGTH - n :] = 1.0
    return mask


def _token_logprobs(seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return -torch.rand(2 * PAIRS, LENGTH - 1, generator=generator, dtype=torch.float64) * 3.0


def _ours(loss_type: str, policy_T: torch.Tensor, ref_T: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    shift = mask[:, 1:].double()
    seq, ref_seq, lengths = (policy_T * shift).sum(1), (ref_T * shift).sum(1), mask.sum(1).double()
    pairs = PairBatch(seq[:PAIRS], seq[PAIRS:], ref_seq[:PAIRS], ref_seq[PAIRS:], lengths[:PAIRS], lengths[PAIRS:])
    params = PreferenceLossParams(beta=BETA, label_smoothing=EPS, simpo_gamma=0.4)
    return preference_loss(loss_type, pairs, params)[0]


def _trl_dpo(loss_type: str, policy_T: torch.Tensor, ref_T: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    shift = mask[:, 1:].double()
    ref_seq = (ref_T * shift).sum(1)

    def model(**kwargs: Any) -> SimpleNamespace:
        # What TRL's fused LM head returns: logprobs of the labels (0 where the label is -100).
        zeros = torch.zeros_like(policy_T)
        return SimpleNamespace(log_probs=policy_T * shift, entropy=zeros, mean_logits=zeros, is_top1=zeros.bool())

    model.training = True  # type: ignore[attr-defined]
    accelerator = SimpleNamespace(device="cpu", gather_for_metrics=lambda t: t, gather=lambda t: t)
    trainer = SimpleNamespace(
        model=model,
        accelerator=accelerator,
        aux_loss_enabled=False,
        ld_alpha=None,
        precompute_ref_logps=True,
        f_divergence_type="reverse_kl",
        loss_types=[loss_type],
        loss_weights=[1.0],
        beta=BETA,
        label_smoothing=EPS,
        use_weighting=False,
        _metrics=defaultdict(lambda: defaultdict(list)),
        _total_train_tokens=0,
        _tp_size=1,
    )
    inputs = {
        "input_ids": torch.zeros(2 * PAIRS, LENGTH, dtype=torch.long),
        "attention_mask": torch.ones(2 * PAIRS, LENGTH, dtype=torch.long),
        "completion_mask": mask.long(),
        "ref_chosen_logps": ref_seq[:PAIRS],
        "ref_rejected_logps": ref_seq[PAIRS:],
    }
    return trl_dpo.DPOTrainer._compute_loss(trainer, model, inputs, return_outputs=False)


def _trl_cpo(loss_type: str, policy_T: torch.Tensor, ref_T: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """CPO is DPO without a reference: `cdpo` is its label-smoothed sigmoid on the reference-
    corrected log-ratios (what TRL's DPO `sigmoid` computed before 1.0); `simpo` its SimPO on
    length-averaged logprobs, reference-free."""
    shift = mask[:, 1:].double()
    seq, lengths = (policy_T * shift).sum(1), mask.sum(1).double()
    if loss_type == "cdpo":
        scores, cpo_type, smoothing = seq - (ref_T * shift).sum(1), "sigmoid", EPS
    else:
        scores, cpo_type, smoothing = seq / lengths, "simpo", 0.0
    trainer = SimpleNamespace(
        alpha=0.0,
        beta=BETA,
        label_smoothing=smoothing,
        loss_type=cpo_type,
        simpo_gamma=0.4,
        accelerator=SimpleNamespace(device="cpu"),
    )
    losses, _, _ = trl_cpo.CPOTrainer.cpo_loss(trainer, scores[:PAIRS], scores[PAIRS:])
    return losses.mean()


TRL_REFERENCE = {"sigmoid": _trl_dpo, "hinge": _trl_dpo, "ipo": _trl_dpo, "robust": _trl_dpo}
TRL_REFERENCE |= {"cdpo": _trl_cpo, "simpo": _trl_cpo}


@pytest.mark.parametrize("loss_type", sorted(TRL_REFERENCE))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_value_and_gradient_equal_trls(loss_type: str, seed: int) -> None:
    mask = _completion_mask()
    ref_T = _token_logprobs(1000 + seed)
    ours_T = _token_logprobs(seed).requires_grad_(True)
    theirs_T = ours_T.detach().clone().requires_grad_(True)
    ours = _ours(loss_type, ours_T, ref_T, mask)
    theirs = TRL_REFERENCE[loss_type](loss_type, theirs_T, ref_T, mask)
    ours.backward()
    theirs.backward()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-10, abs=1e-12)
    assert ours_T.grad is not None and theirs_T.grad is not None
    torch.testing.assert_close(ours_T.grad, theirs_T.grad, rtol=1e-9, atol=1e-12)
    assert ours_T.grad.abs().sum() > 0


@pytest.mark.parametrize("seed", [0, 1])
def test_orpo_value_and_gradient_equal_trls(seed: int) -> None:
    """ORPO on logits: TRL's loss is `chosen NLL - mean(beta * logsigmoid(log odds ratio))`, the
    NLL one token mean over the batch's chosen tokens, the odds on length-averaged logprobs. The
    chosen completions are equally long here, where that NLL equals kitchen's per-pair mean (with
    unequal lengths the two weigh the pairs differently; see `train_core.preference.losses`)."""
    generator = torch.Generator().manual_seed(seed)
    vocab = 11
    logits = torch.randn(2 * PAIRS, LENGTH, vocab, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, vocab, (2 * PAIRS, LENGTH), generator=generator)
    mask = _completion_mask()
    mask[:PAIRS] = 0.0
    mask[:PAIRS, 3:] = 1.0  # chosen completions of one length
    labels = labels.masked_fill(mask == 0, -100)
    ours_logits = logits.clone().requires_grad_(True)
    theirs_logits = logits.clone().requires_grad_(True)

    token_lp = torch.log_softmax(ours_logits[:, :-1], -1).gather(-1, labels[:, 1:].clamp(min=0).unsqueeze(-1))[..., 0]
    shift = mask[:, 1:].double()
    seq, lengths = (token_lp * shift).sum(1), mask.sum(1).double()
    zero = torch.zeros(PAIRS, dtype=torch.float64)
    pairs = PairBatch(seq[:PAIRS], seq[PAIRS:], zero, zero, lengths[:PAIRS], lengths[PAIRS:])
    ours = preference_loss("orpo", pairs, PreferenceLossParams(orpo_lambda=0.25))[0]

    nll = torch.nn.CrossEntropyLoss()(
        theirs_logits[:PAIRS, :-1].reshape(-1, vocab), labels[:PAIRS, 1:].reshape(-1)
    )  # what TRL's concatenated_forward computes as chosen_nll_loss
    avg = trl_orpo.ORPOTrainer.get_batch_logps(theirs_logits, labels, average_log_prob=True)
    trainer = SimpleNamespace(beta=0.25, accelerator=SimpleNamespace(device="cpu"))
    odds_losses, *_ = trl_orpo.ORPOTrainer.odds_ratio_loss(trainer, avg[:PAIRS], avg[PAIRS:])
    theirs = nll - odds_losses.mean()  # get_batch_loss_metrics
    ours.backward()
    theirs.backward()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    assert ours_logits.grad is not None and theirs_logits.grad is not None
    torch.testing.assert_close(ours_logits.grad, theirs_logits.grad, rtol=1e-5, atol=1e-7)
