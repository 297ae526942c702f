"""Sequences that share a prefix run it once and short ones share rows (packed rows, a per-segment
attention mask): each still gets, within float tolerance, the logprobs and gradients it gets
right-padded alone."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoConfig, AutoModelForCausalLM

from adapters.common.tiny import TINY_DIR
from adapters.common.training_batch import right_pad
from adapters.local import forward_pass, unpadded_rows
from adapters.local.forward_pass import (
    MAX_PACKED_WIDTH,
    MIN_SHARED_PREFIX,
    PrefixTree,
    attention_break_even,
    pack_rows,
    pack_sequences,
    prefix_trees,
    sequence_logprobs,
    takes_packed_mask,
    trie_row,
)
from adapters.local.model_loading import load_base_model

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return load_base_model("tiny", torch.float32).eval()


def _sequences(seed: int) -> list[list[int]]:
    """Three prompts with three replies each (one reply empty: the prompt alone), then unrelated
    sequences of varied length (short ones share rows with others)."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(1, 1500) for _ in range(rng.randint(MIN_SHARED_PREFIX + 1, 20))] for _ in range(3)]
    replies = [[rng.randrange(1, 1500) for _ in range(n)] for n in (0, 3, 9)]
    unrelated = [[rng.randrange(1, 1500) for _ in range(n)] for n in (2, 6, 12, 30, 3)]
    return [p + r for p in prompts for r in replies] + unrelated


def _plain(model: torch.nn.Module, inputs_D: list[list[int]], targets_D: list[list[int]]) -> list[torch.Tensor]:
    """Right-padded, from the whole logits: the reference."""
    logits_BLV = model(input_ids=right_pad(inputs_D, 0, CPU), use_cache=False).logits
    logprobs_BL = torch.log_softmax(logits_BLV.float(), -1).gather(-1, right_pad(targets_D, 0, CPU)[..., None])[..., 0]
    return [logprobs_BL[row, : len(tokens)] for row, tokens in enumerate(inputs_D)]


def _gradients(model: torch.nn.Module, logprobs_D: list[torch.Tensor]) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    torch.stack([(lp * (i + 1)).sum() for i, lp in enumerate(logprobs_D)]).sum().backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.fixture(params=["rows", "alone"])
def attention_layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run unpadded, attention goes over the packed rows or over each sequence alone: both."""
    monkeypatch.setattr(forward_pass, "attend_alone", lambda *_: request.param == "alone")
    return str(request.param)


def test_packed_sequences_get_what_they_get_alone(model: torch.nn.Module, attention_layout: str) -> None:
    sequences = _sequences(0)
    inputs_D, targets_D = [s[:-1] for s in sequences], [s[1:] for s in sequences]
    trees = prefix_trees(inputs_D)
    assert sorted(len(tree.ends) for tree in trees) == [1, 1, 1, 1, 1, 3, 3, 3]  # a prompt's replies share it
    assert len(pack_rows(inputs_D)) < len(trees)  # and short sequences share rows
    scored = sequence_logprobs(model, inputs_D, targets_D, 0)
    assert unpadded_rows._WORKS[model]  # the layers ran unpadded, attention as the fixture says
    packed_D, plain_D = scored.logprobs_D, _plain(model, inputs_D, targets_D)
    # what the pass cost: each shared prefix once (no bound on the trees when no attention sees
    # them), and fewer slots than right padding (the rows' padding, or none in one row of trees)
    trees = prefix_trees(inputs_D, unbounded=attention_layout == "alone")
    assert scored.filled == sum(map(_distinct_prefixes, ([inputs_D[i] for i in tree.ends] for tree in trees)))
    assert scored.slots < len(inputs_D) * max(map(len, inputs_D))
    assert scored.filled < scored.slots if attention_layout == "rows" else scored.filled == scored.slots
    assert [lp.shape for lp in packed_D] == [lp.shape for lp in plain_D]
    for packed, plain in zip(packed_D, plain_D, strict=True):
        torch.testing.assert_close(packed, plain, rtol=0, atol=1e-5)
    for packed, plain in zip(_gradients(model, packed_D), _gradients(model, plain_D), strict=True):
        assert (packed - plain).abs().max() <= 1e-5 * plain.abs().max()  # float32 sums in another order


def _distinct_prefixes(sequences: list[list[int]]) -> int:
    """The tokens a prefix tree of `sequences` holds: one per distinct non-empty prefix."""
    return len({tuple(tokens[:n]) for tokens in sequences for n in range(1, len(tokens) + 1)})


@pytest.mark.usefixtures("attention_layout")
def test_sequences_sharing_nested_prefixes_run_each_shared_part_once(model: torch.nn.Module) -> None:
    """A common start, then two prompts, each with two replies sharing their first words, a repeated
    reply and one that stops where another goes on: one tree of four levels, each shared part in
    it once, and every sequence gets what it gets alone."""
    rng = random.Random(3)
    start, answer = [rng.randrange(1, 1500) for _ in range(10)], [rng.randrange(1, 1500) for _ in range(3)]
    sequences = []
    for _ in range(2):
        prompt = start + [rng.randrange(1, 1500) for _ in range(3)]
        sequences += [prompt + answer + [rng.randrange(1, 1500) for _ in range(4)] for _ in range(2)]
    sequences += [sequences[0], sequences[1][:-2]]
    inputs_D, targets_D = [s[:-1] for s in sequences], [s[1:] for s in sequences]
    (tree,) = prefix_trees(inputs_D)
    assert tree.size == _distinct_prefixes(inputs_D) < sum(map(len, inputs_D)) - 3 * len(start)
    assert max(len(tree.path(index)) for index in tree.ends) == 4
    for index in tree.ends:
        assert [t for k in tree.path(index) for t in tree.tokens[k]] == inputs_D[index]
    scored = sequence_logprobs(model, inputs_D, targets_D, 0)
    assert scored.filled == tree.size and unpadded_rows._WORKS[model]
    plain_D = _plain(model, inputs_D, targets_D)
    for packed, plain in zip(scored.logprobs_D, plain_D, strict=True):
        torch.testing.assert_close(packed, plain, rtol=0, atol=1e-5)
    for packed, plain in zip(_gradients(model, scored.logprobs_D), _gradients(model, plain_D), strict=True):
        assert (packed - plain).abs().max() <= 1e-5 * plain.abs().max()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.lists(st.integers(1, 6), min_size=0, max_size=12)), min_size=1, max_size=10
    ),
    st.sampled_from([None, 1.0, 500.0, 1e9]),
    st.booleans(),
)
def test_each_sequence_sees_exactly_its_own_earlier_tokens(
    drawn: list[tuple[int, list[int]]], attention_tokens: float | None, unpadded: bool
) -> None:
    """Whatever the trees and rows: at each sequence's slots stand its tokens at its positions, and
    each of its tokens may attend to exactly its own earlier tokens (the mask allows nothing else)."""
    starts = [[7, 7, 7, 7, 7, 1], [7, 7, 7, 7, 2], [3, 3, 3, 3, 3, 3, 3], []]  # few-token alphabet: much sharing
    inputs_D = [starts[k] + tail for k, tail in drawn]
    if not any(inputs_D):
        return
    packed = pack_sequences(inputs_D, 0, torch.float32, CPU, attention_tokens, unpadded)
    if packed is None:
        return
    ids_S, positions_S = packed.input_ids_BW.flatten(), packed.position_ids_BW.flatten()
    width = packed.input_ids_BW.shape[1]
    slots_D = packed.slots_N.split([len(tokens) for tokens in inputs_D])
    if packed.attention_mask_B1WW is None:  # attention over each sequence alone: it reads its slots
        assert unpadded and packed.input_ids_BW.shape[0] == 1 and packed.filled == width  # one row, no pad
        assert packed.filled == sum(tree.size for tree in prefix_trees(inputs_D, unbounded=True))
    allowed_BWW = None if packed.attention_mask_B1WW is None else packed.attention_mask_B1WW[:, 0] == 0
    for tokens, slots in zip(inputs_D, slots_D, strict=True):
        assert ids_S[slots].tolist() == tokens
        assert positions_S[slots].tolist() == list(range(len(tokens)))
        if allowed_BWW is None:
            continue
        for i, slot in enumerate(slots.tolist()):
            row, query = divmod(slot, width)
            keys = set(torch.nonzero(allowed_BWW[row, query]).flatten().tolist())
            assert keys == {s % width for s in slots[: i + 1].tolist()}


def _slots(rows: list[list[PrefixTree]]) -> tuple[int, int]:
    """(rows x their widest, the widest) of packed rows."""
    widths = [sum(tree.size for tree in row) for row in rows]
    return len(rows) * max(widths), max(widths)


def test_rows_widen_while_attention_is_cheap_against_the_matmuls() -> None:
    rng = random.Random(2)
    inputs_D = [[rng.randrange(1, 1500) for _ in range(rng.randint(5, 40))] for _ in range(24)]
    narrow = pack_rows(inputs_D)
    assert _slots(narrow)[1] == max(map(len, inputs_D))  # no sequence shares a prefix here
    for attention_tokens in (1.0, 500.0, 1e9):
        rows = pack_rows(inputs_D, attention_tokens)
        placed = sorted(i for row in rows for tree in row for i in tree.ends)
        assert placed == list(range(len(inputs_D)))  # each sequence exactly once
        slots, width = _slots(rows)
        assert width <= MAX_PACKED_WIDTH
        if attention_tokens == 1.0:  # attention dominates: no row wider than the longest sequence
            assert width == max(map(len, inputs_D))
        if attention_tokens == 1e9:  # attention is free: one row, no padding
            assert len(rows) == 1 and slots == sum(map(len, inputs_D))
    cost = {
        name: slots * (1 + width / 500.0)
        for name, (slots, width) in (
            ("narrow", _slots(narrow)),
            ("chosen", _slots(pack_rows(inputs_D, 500.0))),
        )
    }
    assert cost["chosen"] <= cost["narrow"]


def test_unpadded_rows_stay_as_narrow_as_the_longest_sequence() -> None:
    """Run unpadded, a row's padding costs only attention (over the whole row), so the widest rows
    that wide packing would choose only cost more: rows stay as wide as the longest sequence."""
    rng = random.Random(2)
    inputs_D = [[rng.randrange(1, 1500) for _ in range(rng.randint(5, 40))] for _ in range(24)]
    longest = max(map(len, inputs_D))
    for attention_tokens in (1.0, 500.0, 1e9):
        rows = pack_rows(inputs_D, attention_tokens, unpadded=True)
        assert sorted(i for row in rows for tree in row for i in tree.ends) == list(range(len(inputs_D)))
        assert _slots(rows)[1] == longest
    assert _slots(pack_rows(inputs_D, 1e9))[1] > longest  # padded rows widen at that price
    packed = pack_sequences(inputs_D, 0, torch.float32, CPU, 500.0, unpadded=True)
    assert packed is not None and packed.input_ids_BW.shape[1] == longest
    assert packed.filled == sum(map(len, inputs_D))


def test_attention_break_even_counts_one_layers_weights(model: torch.nn.Module) -> None:
    """2 x a layer's weights over 4 x its query width: a token's matmuls against its attention."""
    hf_model: Any = model  # a Qwen3ForCausalLM
    config = hf_model.config.get_text_config(decoder=True)
    decoder = hf_model.get_decoder()
    layer = sum(p.numel() for p in decoder.layers[0].parameters())
    final_norm = sum(p.numel() for p in decoder.norm.parameters()) / config.num_hidden_layers
    expected = 2 * (layer + final_norm) / (4 * config.num_attention_heads * config.head_dim)
    assert attention_break_even(model) == pytest.approx(expected)


def test_short_shared_prefixes_and_oversized_rows_are_not_packed() -> None:
    short = [[1, *range(100, 110)], [1, *range(200, 210)]]  # one shared token
    assert [list(tree.ends) for tree in prefix_trees(short)] == [[0], [1]]
    assert pack_sequences(short, 0, torch.float32, CPU) is None  # nothing to save: plain right padding
    prompt = list(range(10, 10 + MIN_SHARED_PREFIX))
    many = [[*prompt, *range(1000 + 20 * i, 1020 + 20 * i)] for i in range(4)]  # each 28 tokens
    trees = prefix_trees(many)
    assert all(tree.size <= 2 * 28 for tree in trees)
    assert [len(tree.ends) for tree in trees] == [2, 2]


def test_attention_over_each_sequence_alone_lets_every_shared_start_run_once() -> None:
    """Trees are bounded because rows' attention grows with their width; attention over each
    sequence alone never sees the rows, so there the batch's whole prefix trie runs, in one row."""
    short = [[1, *range(100, 110)], [1, *range(200, 210)]]
    (tree,) = prefix_trees(short, unbounded=True)
    assert tree.size == 1 + 2 * 10  # one shared token is enough
    prompt = list(range(10, 22))
    many = [[*prompt, *range(1000 + 20 * i, 1020 + 20 * i)] for i in range(4)]  # 32 tokens each
    assert [tree.size for tree in prefix_trees(many)] == [2 * 20 + len(prompt)] * 2  # bounded: two trees
    (tree,) = prefix_trees(many, unbounded=True)
    packed = pack_sequences(many, 0, torch.float32, CPU, 500.0, unpadded=True)
    assert packed is not None and packed.alone  # 4 x 32^2 scores alone against 2 x 52^2 over the rows
    assert packed.filled == packed.input_ids_BW.numel() == tree.size == 4 * 20 + len(prompt)
    padded = pack_sequences(many, 0, torch.float32, CPU, 500.0)
    assert padded is not None and not padded.alone  # rows the layers see padded keep their mask


def test_a_model_with_sliding_window_layers_is_never_packed() -> None:
    """A 4D mask would override the window, so such a model gets the right-padded pass, and with it
    its windowed logprobs."""
    config = AutoConfig.from_pretrained(TINY_DIR)
    config.sliding_window, config.use_sliding_window = 4, True
    config.layer_types = ["sliding_attention"] * config.num_hidden_layers
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        windowed = AutoModelForCausalLM.from_config(config).eval()
    sequences = _sequences(1)
    inputs_D, targets_D = [s[:-1] for s in sequences], [s[1:] for s in sequences]
    with torch.no_grad():
        for got, plain in zip(
            sequence_logprobs(windowed, inputs_D, targets_D, 0).logprobs_D,
            _plain(windowed, inputs_D, targets_D),
            strict=True,
        ):
            torch.testing.assert_close(got, plain, rtol=0, atol=1e-6)


def test_only_attention_that_applies_a_4d_mask_is_packed() -> None:
    """Flash and flex attention take no arbitrary 4D float mask: with them the model would see
    its neighbours in the row, so only eager and sdpa models are packed."""
    config = AutoConfig.from_pretrained(TINY_DIR)
    verdicts = {}
    for implementation in ("eager", "sdpa", "flash_attention_2", "flex_attention"):
        config._attn_implementation = implementation
        model = torch.nn.Module()
        model.config = config
        verdicts[implementation] = takes_packed_mask(model)
    assert verdicts == {"eager": True, "sdpa": True, "flash_attention_2": False, "flex_attention": False}


def test_the_layers_skip_the_rows_padding_and_compute_the_same(model: torch.nn.Module, attention_layout: str) -> None:
    """Outside attention the model runs on the real tokens only (no pad slot); logprobs and
    gradients are those of the padded rows, within float rounding."""
    sequences = _sequences(3)
    inputs_D, targets_D = [s[:-1] for s in sequences], [s[1:] for s in sequences]
    seen: list[int] = []
    hf_model: Any = model  # a Qwen3ForCausalLM
    mlp = hf_model.get_decoder().layers[0].mlp
    assert unpadded_rows.may_run_unpadded(model)  # its probe (one forward) runs once, before the hook
    hook = mlp.register_forward_hook(lambda _m, args, _o: seen.append(args[0].shape[:-1].numel()))
    try:
        unpadded = sequence_logprobs(model, inputs_D, targets_D, 0)
        assert seen == [unpadded.filled]  # one [1, N] sequence: the rows' padding skipped, or none in them
        assert unpadded.filled < unpadded.slots if attention_layout == "rows" else unpadded.filled == unpadded.slots
        unpadded_grads = _gradients(model, unpadded.logprobs_D)
        unpadded_rows._WORKS[model] = False  # the padded rows, as for a model that cannot skip them
        padded = sequence_logprobs(model, inputs_D, targets_D, 0)
        assert seen[-1] == padded.slots  # every slot of the rows, padding included
        padded_grads = _gradients(model, padded.logprobs_D)
    finally:
        hook.remove()
        unpadded_rows._WORKS.pop(model, None)
    for a, b in zip(unpadded.logprobs_D, padded.logprobs_D, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    for a, b in zip(unpadded_grads, padded_grads, strict=True):
        assert (a - b).abs().max() <= 1e-5 * b.abs().max()


@pytest.mark.usefixtures("attention_layout")
def test_a_model_whose_layers_drop_the_layout_runs_padded(model: torch.nn.Module) -> None:
    """The attention function needs the row layout; a model that does not pass it on fails its
    probe and is scored on padded rows ever after, with the same logprobs."""
    sequences = _sequences(4)
    inputs_D, targets_D = [s[:-1] for s in sequences], [s[1:] for s in sequences]
    expected = sequence_logprobs(model, inputs_D, targets_D, 0).logprobs_D
    hf_model: Any = model  # a Qwen3ForCausalLM
    attention = hf_model.get_decoder().layers[0].self_attn
    forward = attention.forward

    def drop_keywords(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("kitchen_rows", None)
        return forward(*args, **kwargs)

    attention.forward = drop_keywords
    try:
        unpadded_rows._WORKS.pop(model, None)
        got = sequence_logprobs(model, inputs_D, targets_D, 0).logprobs_D
        assert unpadded_rows._WORKS[model] is False
    finally:
        del attention.forward
        unpadded_rows._WORKS.pop(model, None)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_an_error_in_an_unpadded_pass_is_raised_not_turned_into_a_fallback(
    model: torch.nn.Module, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the probe decides that a model runs padded (once, logged); an error of a real pass (an
    out-of-memory, a CUDA error) reaches the caller, and the next pass runs unpadded again: a
    quiet permanent fallback would hide GPU-only bugs, and under FSDP one worker falling back
    alone would leave the others waiting in a collective."""
    sequences = _sequences(5)
    inputs_D, targets_D = [s[:-1] for s in sequences], [s[1:] for s in sequences]
    assert unpadded_rows.may_run_unpadded(model)
    hf_model: Any = model  # a Qwen3ForCausalLM
    attention = hf_model.get_decoder().layers[1].self_attn
    forward = attention.forward
    failures = [RuntimeError("CUDA out of memory (a stand-in: no GPU here)")]

    def fail_once(*args: Any, **kwargs: Any) -> Any:
        if failures and "kitchen_rows" in kwargs:
            raise failures.pop()
        return forward(*args, **kwargs)

    attention.forward = fail_once
    try:
        with pytest.raises(RuntimeError, match="out of memory"):
            sequence_logprobs(model, inputs_D, targets_D, 0)
        assert unpadded_rows._WORKS[model] is True
        seen: list[int] = []
        hook = (
            hf_model.get_decoder()
            .layers[0]
            .mlp.register_forward_hook(lambda _m, args, _o: seen.append(args[0].shape[:-1].numel()))
        )
        try:
            again = sequence_logprobs(model, inputs_D, targets_D, 0)
        finally:
            hook.remove()
        assert seen == [again.filled]  # unpadded again
    finally:
        del attention.forward
    assert "padded rows" not in caplog.text


def test_a_model_that_fails_its_probe_is_logged_once(model: torch.nn.Module, caplog: pytest.LogCaptureFixture) -> None:
    hf_model: Any = model
    attention = hf_model.get_decoder().layers[0].self_attn
    forward = attention.forward

    def drop_keywords(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("kitchen_rows", None)
        return forward(*args, **kwargs)

    attention.forward = drop_keywords
    try:
        unpadded_rows._WORKS.pop(model, None)
        with caplog.at_level("WARNING", logger="kitchen.local"):
            decisions = [unpadded_rows.may_run_unpadded(model) for _ in range(3)]
    finally:
        del attention.forward
        unpadded_rows._WORKS.pop(model, None)
    assert decisions == [False, False, False]
    assert caplog.text.count("scored on padded rows") == 1


def test_layers_that_recompute_in_the_backward_pass_keep_the_padded_rows() -> None:
    """Gradient checkpointing reruns each layer in the backward pass, after the forward's attention
    name is restored: such a model is scored on padded rows (same logprobs and gradients)."""
    fresh: Any = load_base_model("tiny", torch.float32).eval()
    assert unpadded_rows.may_run_unpadded(fresh)
    fresh.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    assert not unpadded_rows.may_run_unpadded(fresh)
    sequences = _sequences(5)
    inputs_D, targets_D = [s[:-1] for s in sequences], [s[1:] for s in sequences]
    fresh.train()
    scored = sequence_logprobs(fresh, inputs_D, targets_D, 0)
    fresh.eval()
    plain_D = _plain(fresh, inputs_D, targets_D)
    for packed, plain in zip(scored.logprobs_D, plain_D, strict=True):
        torch.testing.assert_close(packed, plain, rtol=0, atol=1e-5)
    for packed, plain in zip(_gradients(fresh, scored.logprobs_D), _gradients(fresh, plain_D), strict=True):
        assert (packed - plain).abs().max() <= 1e-5 * plain.abs().max()


# -- the prefix-trie row under FlexAttention (CUDA's route) ------------------------------------


@given(st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=12), min_size=1, max_size=10))
@settings(max_examples=60)
def test_the_trie_rows_rule_lets_each_sequence_see_exactly_its_own_tokens(sequences: list[list[int]]) -> None:
    """Laid out depth-first, the slots a sequence's last token may read (kv <= q < subtree_end[kv])
    are exactly that sequence's slots, which hold its tokens at positions 0..L-1."""
    row = trie_row(sequences, CPU)
    tokens, positions, ends = row.input_ids_N.tolist(), row.position_ids_N.tolist(), row.subtree_end_N.tolist()
    offset = 0
    for sequence in sequences:
        slots = row.slots_N[offset : offset + len(sequence)].tolist()
        offset += len(sequence)
        assert [tokens[s] for s in slots] == sequence
        assert [positions[s] for s in slots] == list(range(len(sequence)))
        last = slots[-1]
        assert [kv for kv in range(len(tokens)) if kv <= last < ends[kv]] == slots
    assert len(tokens) <= sum(map(len, sequences))  # shared starts once


def test_the_flex_route_gives_the_masked_routes_logprobs(model: torch.nn.Module) -> None:
    """The whole batch as one prefix-trie row under FlexAttention: the logprobs and entropies of
    the CPU's masked route. (On the CPU FlexAttention runs its reference implementation and has
    no backward: the gradients of this route are checked on a GPU, by scripts/gpu_check.sh.)"""
    sequences = _sequences(2)
    inputs_D, targets_D = [s[:-1] for s in sequences], [s[1:] for s in sequences]
    with torch.no_grad():
        masked = sequence_logprobs(model, inputs_D, targets_D, 0, entropy="value")
        unpadded_rows.set_attention_route(model, "flex")
        try:
            flex = sequence_logprobs(model, inputs_D, targets_D, 0, entropy="value")
        finally:
            unpadded_rows.set_attention_route(model, "mask")
    assert flex.slots == flex.filled <= masked.filled  # no padding, each shared start once
    assert flex.entropy_D is not None and masked.entropy_D is not None
    for a, b in zip(flex.logprobs_D, masked.logprobs_D, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    for a, b in zip(flex.entropy_D, masked.entropy_D, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_cuda_takes_the_flex_route_and_the_cpu_the_masked_one(model: torch.nn.Module) -> None:
    assert unpadded_rows.device_route("cuda") == "flex"  # this torch has FlexAttention
    assert unpadded_rows.device_route("cpu") == "mask"
    assert unpadded_rows.attention_route(model) == "mask"
