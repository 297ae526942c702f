"""Stream-minibatch mode: each minibatch is trained as soon as its groups are in, with one
optimizer step per substep."""

from __future__ import annotations

from pathlib import Path

from adapters.noop.call_log import NoopCall
from tests.rl_workflow.runs import noop_backend, run_toy

STREAM = ["rl.stream_minibatch.num_minibatches=2"]


def training_calls_per_step(calls: list[NoopCall]) -> list[list[str]]:
    """Training-call names between consecutive sampler refreshes (one list per step)."""
    steps: list[list[str]] = [[]]
    for call in calls:
        if call.method == "save_weights_and_get_sampling_client":
            steps.append([])
        elif call.method in ("forward_backward", "optim_step"):
            steps[-1].append(call.method)
    return steps[1:-1]


def test_one_optim_step_per_substep_after_its_minibatches(tmp_path: Path) -> None:
    backend = noop_backend(tmp_path)
    _, rows = run_toy(
        tmp_path,
        *STREAM,
        "rl.num_substeps=2",
        "rl.groups_per_batch=8",
        backend=backend,
    )
    per_step = training_calls_per_step(backend.calls)
    assert len(per_step) == len(rows) == 4
    for calls in per_step:
        assert calls == ["forward_backward", "forward_backward", "optim_step"] * 2
    for row in rows:
        assert row["optim/substeps"] == 2
        assert row["env/all/total_episodes"] == 8 * 4
        assert "optim/kl_sample_train_v2" in row and "by_group/frac_mixed" in row


def test_a_minibatch_trains_before_slow_groups_finish_sampling(tmp_path: Path) -> None:
    backend = noop_backend(tmp_path)
    run_toy(tmp_path, *STREAM, "slow_group_delay=0.3", "eval.every=0", "rl.num_batches=2", backend=backend)
    first_step = backend.calls[: next(i for i, c in enumerate(backend.calls) if c.method == "optim_step")]
    methods = [c.method for c in first_step if c.method in ("sample", "forward_backward")]
    # Three fast groups sample (one call each), their first two form minibatch 1 and train, and
    # only then does the slow group start sampling.
    assert methods == ["sample", "sample", "sample", "forward_backward", "sample", "forward_backward"]
