"""GKD: the generalized JSD's properties (hypothesis) and its top-K support, the per-batch source
draw, the [T, K] teacher targets, the custom loss through the expanded datums, the workflow on
the noop backend for each source, bad settings refused, and the recipe's learning on the tiny
model over three seeds (slow)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kitchen.engine.errors import ConfigError
from kitchen.engine.runs.metrics import read_metrics
from kitchen.testing import RunResult
from tests.helpers import run_cli
from train_core.gkd import (
    batch_source,
    generalized_jsd,
    generalized_jsd_per_token,
    gkd_loss_fn,
    student_topk_logprobs,
    topk_jsd,
    topk_teacher_targets,
)
from train_core.topk_targets import expand_2d_targets

# the shipped teacher is local weights; on noop the teacher is a base model
SHORT = [
    "gkd.teacher.checkpoint=null",
    "rl.num_batches=3",
    "warm_start.steps=2",
    "eval.every=2",
    "rl.groups_per_batch=4",
    "gkd.topk=4",
]

logit_rows = st.integers(min_value=2, max_value=9).flatmap(
    lambda vocab: st.tuples(
        st.lists(st.floats(-20, 20), min_size=vocab, max_size=vocab),
        st.lists(st.floats(-20, 20), min_size=vocab, max_size=vocab),
    )
)


@settings(max_examples=200, deadline=None)
@given(rows=logit_rows, beta=st.floats(0.0, 1.0))
def test_the_divergence_is_nonnegative_and_zero_for_equal_distributions(
    rows: tuple[list[float], list[float]], beta: float
) -> None:
    student, teacher = (torch.tensor(row, dtype=torch.float64) for row in rows)
    assert float(generalized_jsd_per_token(student, teacher, beta)) >= -1e-12
    assert float(generalized_jsd_per_token(teacher, teacher, beta)) == pytest.approx(0.0, abs=1e-12)
    # a shift of the logits is the same distribution
    assert float(generalized_jsd_per_token(teacher + 3.0, teacher, beta)) == pytest.approx(0.0, abs=1e-10)


# the ends, or inside where 1 - beta is not rounded to an end (the mixture's value tends to 0 at
# the ends, which TRL replaces by the two KLs: a jump there)
betas = st.sampled_from([0.0, 1.0]) | st.floats(1e-6, 1 - 1e-6)


@settings(max_examples=200, deadline=None)
@given(rows=logit_rows, beta=betas)
def test_half_is_symmetric_and_the_ends_swap(rows: tuple[list[float], list[float]], beta: float) -> None:
    student, teacher = (torch.tensor(row, dtype=torch.float64) for row in rows)
    half = generalized_jsd_per_token(student, teacher, 0.5)
    assert float(half) == pytest.approx(float(generalized_jsd_per_token(teacher, student, 0.5)), abs=1e-12)
    assert float(half) <= math.log(2) + 1e-12  # the Jensen-Shannon divergence is bounded by log 2
    # beta and 1 - beta swap the roles of student and teacher
    swapped = generalized_jsd_per_token(teacher, student, 1 - beta)
    assert float(generalized_jsd_per_token(student, teacher, beta)) == pytest.approx(float(swapped), abs=1e-9)


def test_the_ends_are_the_forward_and_reverse_kl() -> None:
    p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    q = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    forward = float((q * (q / p).log()).sum())
    reverse = float((p * (p / q).log()).sum())
    assert float(generalized_jsd_per_token(p.log(), q.log(), 0.0)) == pytest.approx(forward)
    assert float(generalized_jsd_per_token(p.log(), q.log(), 1.0)) == pytest.approx(reverse)


def test_the_top_k_support_renormalises_both_and_covers_the_full_vocabulary_when_k_is_v() -> None:
    generator = torch.Generator().manual_seed(0)
    student = torch.randn(4, 6, generator=generator, dtype=torch.float64)
    teacher = torch.randn(4, 6, generator=generator, dtype=torch.float64)
    mask = torch.tensor([True, True, False, True])
    full = generalized_jsd(student, teacher, mask, 0.3, 0.8)
    every = torch.ones(4, 6, dtype=torch.bool)
    assert float(generalized_jsd(student, teacher, mask, 0.3, 0.8, every)) == pytest.approx(float(full), abs=1e-12)
    # on three cells: the divergence of the two distributions renormalised over those cells
    support = torch.zeros(4, 6, dtype=torch.bool)
    support[:, :3] = True
    on_support = generalized_jsd(student, teacher, mask, 0.3, 0.8, support)
    assert float(on_support) == pytest.approx(float(generalized_jsd(student[:, :3], teacher[:, :3], mask, 0.3, 0.8)))
    assert float(on_support) != pytest.approx(float(full))
    # the student's mass outside the support does not count, and gets no gradient
    lifted = student.clone().requires_grad_(True)
    generalized_jsd(lifted, teacher, mask, 0.3, 0.8, support).backward()
    assert lifted.grad is not None and float(lifted.grad[:, 3:].abs().max()) == 0.0


def test_bad_beta_and_temperature_are_refused() -> None:
    row = torch.zeros(3)
    with pytest.raises(ValueError, match="beta"):
        generalized_jsd_per_token(row, row, 1.5)
    with pytest.raises(ValueError, match="temperature"):
        generalized_jsd_per_token(row, row, 0.5, temperature=0.0)


def test_sources_follow_lmbda_and_seq_kd() -> None:
    draws = [batch_source(0, step, 0.3, False) for step in range(2000)]
    assert set(draws) == {"student", "dataset"}
    assert draws.count("student") / len(draws) == pytest.approx(0.3, abs=0.04)
    assert {batch_source(0, step, 0.3, True) for step in range(200)} == {"student", "teacher"}
    assert {batch_source(1, step, 1.0, True) for step in range(200)} == {"student"}
    assert {batch_source(1, step, 0.0, False) for step in range(200)} == {"dataset"}
    assert [batch_source(5, s, 0.5, True) for s in range(50)] == [batch_source(5, s, 0.5, True) for s in range(50)]


def test_teacher_targets_sit_at_the_masked_targets_and_the_loss_reads_them_back() -> None:
    tokens = [1, 2, 3, 7, 8]  # targets: 2 3 7 8; the completion is 7 8
    rows = [[(9, -0.1)] for _ in range(4)]
    rows[2] = [(7, math.log(0.6)), (4, math.log(0.3)), (5, math.log(0.05))]
    rows[3] = [(8, math.log(0.9))]
    targets = topk_teacher_targets(tokens, [0, 0, 1, 1], rows, k=2)
    grid = targets.datum.loss_fn_inputs["target_tokens"].to_torch()
    assert targets.positions == 2 and targets.datum.model_input.to_ints() == [1, 2, 3, 7]
    assert grid.tolist() == [[-1, -1], [-1, -1], [7, 4], [8, -1]]
    assert targets.teacher_logprobs_TK[2].tolist() == pytest.approx([math.log(0.6), math.log(0.3)])
    expanded = expand_2d_targets([targets.datum], "cross_entropy")
    assert expanded is not None and len(expanded.data) == 2
    # a student equal to the teacher on the support (up to scale) has divergence 0, a different one more
    same = [torch.tensor([0.0, 0.0, math.log(0.2), math.log(0.3)]), torch.tensor([0.0, 0.0, math.log(0.1), 0.0])]
    value, positions = topk_jsd([targets], student_topk_logprobs(expanded, same), 0.5)
    assert positions == 2 and float(value) == pytest.approx(0.0, abs=1e-12)
    # the expanded datums' logprobs are the grid's columns: row 2 is (log 0.1, -0.1), row 3 one cell
    other = [torch.tensor([0.0, 0.0, math.log(0.1), 0.0], requires_grad=True), torch.tensor([0.0, 0.0, -0.1, 0.0])]
    loss, metrics = gkd_loss_fn([targets], expanded, 0.5)(expanded.data, other)
    q = torch.tensor([2 / 3, 1 / 3], dtype=torch.float64)
    p = torch.softmax(torch.tensor([math.log(0.1), -0.1], dtype=torch.float64), 0)
    m = (p + q) / 2
    expected = float(0.5 * (q * (q / m).log()).sum() + 0.5 * (p * (p / m).log()).sum()) / 2  # one of two positions
    assert float(loss.detach()) == pytest.approx(expected) and metrics["gkd/jsd"] == pytest.approx(expected)
    loss.backward()
    assert other[0].grad is not None and float(other[0].grad[2].abs()) > 0
    # no gradient off the completion, nor on a one-cell support (renormalised, it is always 1)
    assert other[0].grad[[0, 1, 3]].tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "source",
    [["gkd.lmbda=1"], ["gkd.lmbda=0"], ["gkd.lmbda=0", "gkd.seq_kd=true"]],
    ids=["on_policy", "dataset", "seq_kd"],
)
def test_gkd_trains_on_each_source(kitchen_run: Callable[..., RunResult], source: list[str]) -> None:
    run = kitchen_run("gkd", *SHORT, *source)
    rows = run.metrics
    assert [row["step"] for row in rows] == [0, 1, 2]
    on_policy = "gkd.lmbda=1" in source
    teacher = "gkd.seq_kd=true" in source
    for row in rows:
        assert row["gkd/on_policy"] == float(on_policy) and row["gkd/teacher_generated"] == float(teacher)
        assert row["gkd/positions"] > 0 and row["gkd/jsd"] >= 0
    assert rows[0]["eval/gkd_jsd"] >= 0 and "eval/all/reward/total" in rows[0]
    assert (run.path / "checkpoints.jsonl").exists()


def test_bad_settings_are_refused(kitchen_run: Callable[..., RunResult]) -> None:
    with pytest.raises(ConfigError, match="sync mode"):
        kitchen_run("gkd", *SHORT, "rl.async_config.max_steps_off_policy=1")
    with pytest.raises(ConfigError, match=r"gkd\.beta"):
        kitchen_run("gkd", *SHORT, "gkd.beta=1.5")


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recipe's warm start, once: a sloppy student (see recipes/gkd.py)."""
    path = tmp_path_factory.mktemp("gkd_warm")
    result = run_cli("run", "gkd", "rl.num_batches=1", "eval.every=0", f"log_path={path}")
    assert result.returncode == 0, result.stderr
    return path / "checkpoints" / "weights" / "warm_start"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gkd_brings_the_student_closer_to_the_teacher_on_held_out_problems(
    warm_start: Path, tmp_path: Path, seed: int
) -> None:
    """From the recipe's warm start, 30 GKD steps (half on-policy) lower the student's generalized
    JSD to the teacher on the held-out problems' completions (never trained on) by at least 10%
    for every seed. Measured (2026-11-28, 2 cores, these commands): 0.051 -> 0.036, 0.048 -> 0.036,
    0.058 -> 0.048."""
    overrides = [f"seed={seed}", f"load_checkpoint_path={warm_start}", "warm_start.steps=0"]
    result = run_cli("run", "gkd", *overrides, "rl.num_batches=30", "eval.every=30", f"log_path={tmp_path}")
    assert result.returncode == 0, result.stderr
    rows = read_metrics(tmp_path / "metrics.jsonl")
    jsd = [row["eval/gkd_jsd"] for row in rows if "eval/gkd_jsd" in row]
    assert len(jsd) == 2 and jsd[1] < 0.9 * jsd[0], jsd
    assert {row["gkd/on_policy"] for row in rows} == {0.0, 1.0}
