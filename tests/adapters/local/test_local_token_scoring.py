"""Logprobs and entropy from the final hidden states, a chunk of tokens at a time: the same values
(<= 1e-6 in float32) and gradients as from the whole logits, with no more than one chunk of
[tokens, vocab] at once, in training, reference scoring and prompt scoring alike."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import Gemma2Config, Gemma2ForCausalLM

from adapters.local import LocalBackend, forward_pass, token_scoring
from adapters.local.forward_pass import sequence_logprobs
from adapters.local.model_loading import load_base_model
from adapters.local.prompt_scoring import ScoreRequest, score_prompts
from adapters.local.token_scoring import Entropy, chunked_scores, logits_scores, output_head
from adapters.local.training_client import TrainingOptions
from kitchen.engine.errors import ConfigError
from tests.adapters.local.conftest import shifted
from train_core.rl.entropy_mask import high_entropy_mask
from train_core.rl.policy_objective import PolicyObjective
from train_core.types import AdamParams, Datum

ENTROPIES: tuple[Entropy, ...] = ("none", "value", "grad")


def _objective(logprobs_N: torch.Tensor, entropy_N: torch.Tensor | None, entropy: Entropy) -> torch.Tensor:
    """A loss that weighs every token differently (so a misplaced chunk would show)."""
    weights_N = torch.linspace(-1.0, 2.0, logprobs_N.shape[0])
    loss = (logprobs_N * weights_N).sum()
    if entropy == "grad":
        assert entropy_N is not None
        loss = loss + (entropy_N * weights_N.flip(0)).sum()
    return loss


@settings(max_examples=40, deadline=None)
@given(
    tokens=st.integers(1, 40),
    chunk=st.integers(1, 48),
    entropy=st.sampled_from(ENTROPIES),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_chunked_scores_equal_whole_logits_in_values_and_gradients(
    tokens: int, chunk: int, entropy: Entropy, bias: bool, seed: int
) -> None:
    generator = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(16, 50, bias=bias)
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator) / 4)  # logits of std ~1
    hidden_NH = torch.randn((tokens, 16), generator=generator).requires_grad_()
    targets_N = torch.randint(0, 50, (tokens,), generator=generator)

    def run(chunked: bool) -> tuple[torch.Tensor, torch.Tensor | None, list[torch.Tensor]]:
        head.zero_grad(set_to_none=True)
        hidden_NH.grad = None
        if chunked:
            logprobs_N, entropy_N = chunked_scores(head, hidden_NH, targets_N, entropy, chunk)
        else:
            logprobs_N, entropy_N = logits_scores(head(hidden_NH), targets_N, entropy)
        _objective(logprobs_N, entropy_N, entropy).backward()
        grads = [hidden_NH.grad, *(p.grad for p in head.parameters())]
        return logprobs_N.detach(), entropy_N, [g.clone() for g in grads if g is not None]

    chunked, whole = run(True), run(False)
    torch.testing.assert_close(chunked[0], whole[0], rtol=1e-6, atol=1e-6)  # a matmul of fewer rows may round apart
    if entropy == "none":
        assert chunked[1] is None and whole[1] is None
    else:
        assert chunked[1] is not None and whole[1] is not None
        assert chunked[1].requires_grad == (entropy == "grad")  # a value-only entropy keeps no graph
        torch.testing.assert_close(chunked[1].detach(), whole[1].detach(), rtol=0, atol=1e-5)
    assert len(chunked[2]) == len(whole[2]) == 2 + bias
    for got, expected in zip(chunked[2], whole[2], strict=True):
        assert (got - expected).abs().max() <= 1e-6 * max(1.0, float(expected.abs().max()))


class RowCounter(torch.nn.Module):
    """A linear head that records how many rows it was called on."""

    def __init__(self, head: torch.nn.Linear) -> None:
        super().__init__()
        self.head = head
        self.rows: list[int] = []

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        self.rows.append(hidden.shape[0])
        return self.head(hidden)


def test_the_head_never_sees_more_than_a_chunk_and_recomputes_it_for_backward() -> None:
    counter = RowCounter(torch.nn.Linear(8, 30))
    hidden_NH = torch.randn(23, 8, requires_grad=True)
    logprobs_N, entropy_N = chunked_scores(counter, hidden_NH, torch.randint(0, 30, (23,)), "grad", 5)
    assert counter.rows == [5, 5, 5, 5, 3]
    assert entropy_N is not None
    (logprobs_N.sum() + entropy_N.sum()).backward()
    assert counter.rows[5:] == [3, 5, 5, 5, 5]  # every chunk again in the backward pass (last first): none kept
    counter.rows.clear()
    with torch.no_grad():
        chunked_scores(counter, hidden_NH, torch.randint(0, 30, (23,)), "value", 5)
    assert counter.rows == [5, 5, 5, 5, 3]  # and without gradients nothing is recomputed


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return load_base_model("tiny", torch.float32).eval()


def _sequences(seed: int, shared_prompt: bool) -> tuple[list[list[int]], list[list[int]]]:
    rng = random.Random(seed)
    prompt = [rng.randrange(1, 1500) for _ in range(12)] if shared_prompt else []
    sequences = [prompt + [rng.randrange(1, 1500) for _ in range(rng.randint(3, 20))] for _ in range(6)]
    return [s[:-1] for s in sequences], [s[1:] for s in sequences]


def _grads(model: torch.nn.Module, loss: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("shared_prompt", [True, False], ids=["packed", "right-padded"])
def test_sequence_logprobs_chunked_equal_the_whole_logits(
    model: torch.nn.Module, shared_prompt: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tiny model, with chunks of 7 tokens (several chunks, recomputed in backward)."""
    monkeypatch.setattr(token_scoring, "LOGITS_BUDGET", 7 * 1500)
    inputs_D, targets_D = _sequences(0, shared_prompt)
    results = {}
    for method in ("chunked", "full"):
        scored = sequence_logprobs(model, inputs_D, targets_D, 0, method, "grad")
        assert scored.entropy_D is not None
        logprobs_N, entropy_N = torch.cat(scored.logprobs_D), torch.cat(scored.entropy_D)
        grads = _grads(model, _objective(logprobs_N, entropy_N, "grad"))
        results[method] = (logprobs_N.detach(), entropy_N.detach(), grads)
    chunked, full = results["chunked"], results["full"]
    torch.testing.assert_close(chunked[0], full[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(chunked[1], full[1], rtol=0, atol=1e-6)
    assert len(chunked[2]) == len(full[2]) == len(list(model.parameters()))
    for got, expected in zip(chunked[2], full[2], strict=True):
        assert (got - expected).abs().max() <= 1e-5 * max(1e-3, float(expected.abs().max()))
    # the reference entropy, from the whole distribution of each position
    logits_1LV = model(input_ids=torch.tensor([inputs_D[0]]), use_cache=False).logits
    probs_LV = torch.softmax(logits_1LV[0].double(), -1)
    expected = -(probs_LV * probs_LV.log()).sum(-1)
    torch.testing.assert_close(chunked[1][: len(inputs_D[0])].double(), expected, rtol=0, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 200_000)), min_size=0, max_size=30))
def test_distinct_pairs_give_back_every_pair_from_one_copy(pairs: list[tuple[int, int]]) -> None:
    """Whatever the slots and targets (ids past any vocabulary included): each of the N pairs is
    its distinct pair, and no two distinct pairs are equal."""
    slots_N = torch.tensor([slot for slot, _ in pairs], dtype=torch.long)
    targets_N = torch.tensor([target for _, target in pairs], dtype=torch.long)
    distinct = token_scoring.distinct_pairs(slots_N, targets_N)
    if distinct is None:
        assert len(set(pairs)) == len(pairs)
        return
    slots_U, targets_U, inverse_N = distinct
    assert len(set(zip(slots_U.tolist(), targets_U.tolist(), strict=True))) == len(slots_U) == len(set(pairs))
    assert slots_U[inverse_N].tolist() == slots_N.tolist() and targets_U[inverse_N].tolist() == targets_N.tolist()


def test_tokens_that_sequences_share_reach_the_head_once(
    model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared prompt's tokens have the same hidden state and the same target in each sequence that
    starts with it: the head scores each (prefix, target) pair once, and every sequence still gets
    its logprobs (gradients: `test_sequence_logprobs_chunked_equal_the_whole_logits`)."""
    monkeypatch.setattr(forward_pass, "attend_alone", lambda *_: True)  # the whole batch in one tree
    inputs_D, targets_D = _sequences(0, True)
    rows: list[int] = []
    output_head(model)  # its one-time check calls the head too
    head = cast(torch.nn.Module, cast(Any, model).get_output_embeddings())
    hook = head.register_forward_hook(lambda _m, args, _o: rows.append(args[0].shape[0]))
    try:
        with torch.no_grad():
            scored = sequence_logprobs(model, inputs_D, targets_D, 0)
    finally:
        hook.remove()
    pairs = {(tuple(i[: t + 1]), o[t]) for i, o in zip(inputs_D, targets_D, strict=True) for t in range(len(i))}
    assert rows == [len(pairs)] and len(pairs) == sum(map(len, targets_D)) - 5 * 11  # 11 shared targets, 6 times
    with torch.no_grad():
        full = sequence_logprobs(model, inputs_D, targets_D, 0, "full")
    for got, expected in zip(scored.logprobs_D, full.logprobs_D, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_prompt_scoring_is_the_same_chunked_or_whole(model: torch.nn.Module) -> None:
    requests = [ScoreRequest([*tokens, t[-1]]) for tokens, t in zip(*_sequences(1, True), strict=True)]
    chunked = score_prompts(model, requests, 0, "chunked")
    full = score_prompts(model, requests, 0, "full")
    for got, expected in zip(chunked, full, strict=True):
        assert got[0] is None and expected[0] is None
        torch.testing.assert_close(torch.tensor(got[1:]), torch.tensor(expected[1:]), rtol=0, atol=1e-6)


def test_a_model_that_transforms_its_logits_is_scored_from_its_whole_logits() -> None:
    """Gemma 2 soft-caps its logits after the head: the split would miss that, so it is refused
    (checked against the model's own forward) and the scores are still the model's."""
    config = Gemma2Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        final_logit_softcapping=5.0,
        initializer_range=0.5,
    )
    torch.manual_seed(0)
    capped = Gemma2ForCausalLM(config).eval()
    assert output_head(capped) is None
    config.final_logit_softcapping = None
    plain = Gemma2ForCausalLM(config).eval()
    assert output_head(plain) is not None
    inputs_D, targets_D = [[1, 2, 3, 4, 5], [6, 7, 8]], [[2, 3, 4, 5, 6], [7, 8, 9]]
    with torch.no_grad():
        logits_BLV = capped(input_ids=torch.tensor([inputs_D[0]]), use_cache=False).logits
        expected = torch.log_softmax(logits_BLV[0].float(), -1).gather(-1, torch.tensor(targets_D[0])[:, None])[:, 0]
        got = sequence_logprobs(capped, inputs_D, targets_D, 0).logprobs_D[0]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


async def _fb(backend: LocalBackend, data: Sequence[Datum], loss_fn: str) -> list[dict[str, list[float]]]:
    client = await backend.create_training_client("tiny")
    result = await (await client.forward_backward(data, loss_fn))
    return [{key: [float(v) for v in value.tolist()] for key, value in out.items()} for out in result.loss_fn_outputs]


def test_rl_losses_get_the_entropy_of_every_token_and_supervised_ones_skip_it(
    backend: LocalBackend, rl_batch: list[Datum], sl_batch: list[Datum]
) -> None:
    rl_outputs = asyncio.run(_fb(backend, rl_batch, "ppo"))
    sl_outputs = asyncio.run(_fb(backend, sl_batch, "cross_entropy"))
    assert all(set(output) == {"logprobs", "entropy"} for output in rl_outputs)
    assert all(set(output) == {"logprobs"} for output in sl_outputs)
    model = load_base_model("tiny", torch.float32)
    for datum, output in zip(rl_batch, rl_outputs, strict=True):
        with torch.no_grad():
            logits_LV = model(input_ids=torch.tensor([datum.model_input.to_ints()]), use_cache=False).logits[0]
        logprobs_LV = torch.log_softmax(logits_LV, -1)
        expected = -(logprobs_LV.exp() * logprobs_LV).sum(-1)
        torch.testing.assert_close(torch.tensor(output["entropy"]), expected, rtol=0, atol=1e-5)


def test_a_custom_loss_that_takes_entropy_gets_it_with_gradients(backend: LocalBackend, sl_batch: list[Datum]) -> None:
    """An entropy bonus: `entropy_D` comes from the same pass as the logprobs and carries gradients
    (a loss of the entropy alone still trains the model)."""
    seen: list[list[torch.Tensor]] = []

    def bonus(
        data: Sequence[Datum], logprobs_D: list[torch.Tensor], entropy_D: list[torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        assert entropy_D is not None
        seen.append([e.detach().clone() for e in entropy_D])
        return -torch.cat(entropy_D).sum(), {}

    async def run() -> float:
        client = await backend.create_training_client("tiny")
        await (await client.forward_backward_custom(sl_batch, bonus))
        return (await (await client.optim_step(AdamParams(learning_rate=0.0, grad_clip_norm=1e9)))).metrics["grad_norm"]

    grad_norm = asyncio.run(run())
    assert grad_norm > 0
    assert [len(e) for e in seen[0]] == [d.model_input.length for d in sl_batch]


def test_a_custom_loss_that_takes_log_sum_sq_probs_gets_each_positions_collision_probability(
    backend: LocalBackend, sl_batch: list[Datum]
) -> None:
    """WPO's input: `log_sum_sq_probs_D` is each position's `log sum_v p_v^2` under the policy
    (checked against the model's whole distribution), without gradients, beside the logprobs."""
    seen: list[list[torch.Tensor]] = []

    def wpo_like(
        data: Sequence[Datum], logprobs_D: list[torch.Tensor], log_sum_sq_probs_D: list[torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        assert log_sum_sq_probs_D is not None
        seen.append(log_sum_sq_probs_D)
        return -torch.cat(logprobs_D).sum(), {}

    async def run() -> None:
        client = await backend.create_training_client("tiny")
        await (await client.forward_backward_custom(sl_batch, wpo_like))

    asyncio.run(run())
    model = load_base_model("tiny", torch.float32)
    assert len(seen[0]) == len(sl_batch)
    for datum, got in zip(sl_batch, seen[0], strict=True):
        assert not got.requires_grad
        with torch.no_grad():
            logits_LV = model(input_ids=torch.tensor([datum.model_input.to_ints()]), use_cache=False).logits[0]
        probs_LV = torch.softmax(logits_LV.double(), -1)
        expected = (probs_LV**2).sum(-1).log()
        torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-5)


def test_liger_is_refused_where_it_cannot_run(tmp_path: Path) -> None:
    """Liger's kernels are Triton on CUDA: on a CPU the setting fails at once, naming itself. (The
    Liger path itself cannot be tested on this project's GPU-less machines.)"""
    with pytest.raises(ConfigError, match=r"local\.logprob_method=liger needs a CUDA device"):
        LocalBackend(tmp_path, device="cpu", training=TrainingOptions(logprob_method="liger"))


def test_top_entropy_quantile_trains_only_the_high_entropy_tokens(
    backend: LocalBackend, token_lists: list[list[int]]
) -> None:
    """`top_entropy_quantile` on the tiny model: the objective's mask comes from the entropies of
    the same forward pass, and the action tokens it leaves out get exactly zero gradient while the
    kept ones get some (an unclipped loss, no KL or entropy term, which would reach every action
    token)."""
    objective = PolicyObjective("importance_sampling", aggregation="token_mean", top_entropy_quantile=0.3)
    data = []
    for index, tokens in enumerate(token_lists):
        n = len(tokens) - 1
        data.append(
            shifted(
                tokens,
                logprobs=[-7.0] * n,
                advantages=[1.0 if index % 2 == 0 else -1.0] * n,
                mask=[float(i >= 2) for i in range(n)],
            )
        )
    seen: dict[str, list[torch.Tensor]] = {}

    def loss_fn(
        data_D: Sequence[Datum], logprobs_D: list[torch.Tensor], entropy_D: list[torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        for logprobs_T in logprobs_D:
            logprobs_T.retain_grad()
        seen["logprobs"], seen["entropy"] = logprobs_D, [e.detach() for e in entropy_D or []]
        return objective.loss(data_D, logprobs_D, entropy_D)

    async def run() -> dict[str, float]:
        client = await backend.create_training_client("tiny")
        return (await (await client.forward_backward_custom(data, loss_fn))).metrics

    metrics = asyncio.run(run())
    masks_D = [datum.loss_fn_inputs["mask"].to_torch() for datum in data]
    keep_D = high_entropy_mask(seen["entropy"], masks_D, 0.3)
    kept = sum(int(keep_T.sum()) for keep_T in keep_D)
    actions = sum(int((mask_T > 0).sum()) for mask_T in masks_D)
    assert 0.3 * actions - 1 <= kept < actions
    for logprobs_T, keep_T, mask_T in zip(seen["logprobs"], keep_D, masks_D, strict=True):
        assert logprobs_T.grad is not None
        left_out = (mask_T > 0) & ~keep_T
        assert not logprobs_T.grad[left_out].any()
        if keep_T.any():
            assert float(logprobs_T.grad[keep_T].abs().min()) > 0.0
    assert any(key.startswith("loss/high_entropy_tokens") for key in metrics), metrics
