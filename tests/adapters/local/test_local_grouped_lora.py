"""Several LoRA clients' sequences in one pass over their shared base (`grouped_lora`): each client
gets, within float tolerance, the logprobs and gradients of its own pass, whatever the layout the
pass takes (right-padded rows, packed rows, unpadded tokens, the flex route's trie row, whole
logits), and nothing of another client's adapters."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from adapters.local import forward_pass, unpadded_rows
from adapters.local.forward_pass import sequence_logprobs
from adapters.local.grouped_lora import AdapterGroups, AdapterLayer, Routing, adapter_layers, groupable, shared_copy
from adapters.local.model_loading import LoraOptions, add_lora, load_base_model
from adapters.local.token_scoring import LogprobMethod, output_head
from train_core.types import LoraLayers

CPU = torch.device("cpu")
CLIENTS = (  # (rank, seed, layers): ranks differ; the second has no adapter on the head
    (4, 1, LoraLayers(attn=True, mlp=True, unembed=True)),
    (2, 2, LoraLayers(attn=True, mlp=False, unembed=False)),
    (8, 3, LoraLayers(attn=False, mlp=True, unembed=True)),
)


@pytest.fixture(scope="module")
def base() -> torch.nn.Module:
    return load_base_model("tiny", torch.float32).eval()


def _client(base: torch.nn.Module, rank: int, seed: int, layers: LoraLayers) -> torch.nn.Module:
    """A LoRA client on the shared base, its B matrices drawn too (fresh LoRA adds nothing)."""
    model = add_lora(shared_copy(base), rank, seed, LoraOptions(), layers)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    return model


@pytest.fixture(scope="module")
def clients(base: torch.nn.Module) -> list[torch.nn.Module]:
    return [_client(base, *spec) for spec in CLIENTS]


def _batches(seed: int) -> list[list[list[int]]]:
    """Each client's sequences: a prompt with replies (packing shares it), unrelated ones of varied
    length, and one sequence every client has (it must not be shared across clients)."""
    rng = random.Random(seed)
    common = [rng.randrange(1, 1500) for _ in range(11)]
    batches = []
    for _ in CLIENTS:
        prompt = [rng.randrange(1, 1500) for _ in range(9)]
        replies = [[rng.randrange(1, 1500) for _ in range(n)] for n in (2, 7)]
        unrelated = [[rng.randrange(1, 1500) for _ in range(n)] for n in (3, 14)]
        batches.append([prompt + r for r in replies] + unrelated + [common])
    return batches


def _targets(inputs_D: list[list[int]]) -> list[list[int]]:
    return [[(t * 7 + 3) % 1500 for t in tokens] for tokens in inputs_D]


def _weights(scores: list[torch.Tensor]) -> torch.Tensor:
    """A loss that weighs every token differently, so gradients see each one."""
    return torch.stack([(lp * (k + 1)).sum() for k, lp in enumerate(scores)]).sum()


def _adapters(clients: list[torch.nn.Module]) -> list[dict[str, AdapterLayer]]:
    """Each client's adapter layers (every one of them groupable)."""
    layers = []
    for model in clients:
        found = adapter_layers(model)
        assert found is not None
        layers.append(found)
    return layers


def _head(model: torch.nn.Module) -> torch.nn.Module:
    split = output_head(model)
    assert split is not None
    return split.head


def _gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


LAYOUTS = ("padded", "packed", "unpadded", "alone", "flex", "full")


@pytest.fixture(params=LAYOUTS)
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """How the pass lays its sequences out: right-padded rows (no packing), packed rows under a
    mask, the unpadded tokens with attention over the rows or over each sequence alone, the flex
    route's trie row, and the whole-logits method."""
    name = str(request.param)
    monkeypatch.setattr(forward_pass, "attend_alone", lambda *_: name == "alone")
    if name == "padded":
        monkeypatch.setattr(forward_pass, "pack_sequences", lambda *_, **__: None)
    yield name


def _prepare(model: torch.nn.Module, layout: str) -> None:
    unpadded_rows._WORKS[model] = layout not in ("padded", "packed")
    unpadded_rows.set_attention_route(model, "flex" if layout == "flex" else "mask")


def test_a_grouped_pass_gives_each_client_what_its_own_pass_gives(
    base: torch.nn.Module, clients: list[torch.nn.Module], layout: str
) -> None:
    method: LogprobMethod = "full" if layout == "full" else "chunked"
    backward = layout != "flex"  # FlexAttention has no backward on the CPU
    batches = _batches(0)
    torch.set_grad_enabled(backward)
    try:
        _check_grouped_pass(base, clients, layout, method, batches, backward)
    finally:
        torch.set_grad_enabled(True)


def _check_grouped_pass(
    base: torch.nn.Module,
    clients: list[torch.nn.Module],
    layout: str,
    method: LogprobMethod,
    batches: list[list[list[int]]],
    backward: bool,
) -> None:
    alone = []
    for model, inputs_D in zip(clients, batches, strict=True):
        _prepare(model, layout)
        model.zero_grad(set_to_none=True)
        scored = sequence_logprobs(model, inputs_D, _targets(inputs_D), 0, method, "value")
        if backward:
            _weights(scored.logprobs_D).backward()
        alone.append((scored, _gradients(model)))
        model.zero_grad(set_to_none=True)

    host = shared_copy(base).eval()
    _prepare(host, layout)
    inputs_D = [tokens for batch in batches for tokens in batch]
    groups_D = [g for g, batch in enumerate(batches) for _ in batch]
    heads = [None if method == "full" else _head(model) for model in clients]
    groups = AdapterGroups(host, _adapters(clients), heads, groups_D, list(map(len, inputs_D)))
    scored = sequence_logprobs(host, inputs_D, _targets(inputs_D), 0, method, "value", groups)
    start, losses = 0, []
    for g, batch in enumerate(batches):
        own = scored.logprobs_D[start : start + len(batch)]
        losses.append(_weights(own))
        assert own[0].requires_grad == backward
        torch.testing.assert_close(torch.cat(own), torch.cat(alone[g][0].logprobs_D), rtol=1e-5, atol=1e-5)
        solo_entropy = alone[g][0].entropy_D
        assert scored.entropy_D is not None and solo_entropy is not None
        own_entropy = torch.cat(scored.entropy_D[start : start + len(batch)])
        torch.testing.assert_close(own_entropy, torch.cat(solo_entropy), rtol=1e-5, atol=1e-5)
        start += len(batch)
    if layout in ("packed", "unpadded", "alone", "flex"):
        assert scored.filled < sum(map(len, inputs_D))  # prefixes were shared: the layout packed
    if not backward:
        return
    torch.stack(losses).sum().backward()
    for g, model in enumerate(clients):
        grads = _gradients(model)
        assert grads.keys() == alone[g][1].keys() and grads
        for name, grad in grads.items():
            reference = alone[g][1][name]
            assert (grad - reference).abs().max() <= 1e-5 * (1 + reference.abs().max()), name
        model.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in host.parameters())  # the shared base stays frozen


def test_the_same_sequence_of_two_clients_runs_through_each_ones_adapters(
    base: torch.nn.Module, clients: list[torch.nn.Module]
) -> None:
    tokens = list(range(20, 40))
    host = shared_copy(base).eval()
    heads: list[torch.nn.Module | None] = [_head(model) for model in clients[:2]]
    groups = AdapterGroups(host, _adapters(clients[:2]), heads, [0, 1], [20, 20])
    with torch.no_grad():
        scored = sequence_logprobs(host, [tokens, tokens], [tokens, tokens], 0, groups=groups)
        first = sequence_logprobs(clients[0], [tokens], [tokens], 0).logprobs_D[0]
        second = sequence_logprobs(clients[1], [tokens], [tokens], 0).logprobs_D[0]
    assert scored.filled == 40  # not one shared prefix tree
    assert not torch.allclose(first, second)
    torch.testing.assert_close(scored.logprobs_D[0], first, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(scored.logprobs_D[1], second, rtol=1e-5, atol=1e-6)


def test_clients_share_the_base_weights_and_train_only_their_adapters(
    base: torch.nn.Module, clients: list[torch.nn.Module]
) -> None:
    base_tensors = {p.data_ptr() for p in base.parameters()}
    for model in clients:
        frozen = [p for p in model.parameters() if not p.requires_grad]
        assert frozen and all(p.data_ptr() in base_tensors for p in frozen)
        assert all("lora_" in name for name, p in model.named_parameters() if p.requires_grad)
        assert groupable(model)
    assert not groupable(base)  # no adapters at all


def test_adapters_a_grouped_pass_cannot_apply_are_not_grouped(base: torch.nn.Module) -> None:
    from peft import LoraConfig, get_peft_model

    dora = get_peft_model(shared_copy(base), LoraConfig(r=2, target_modules=["q_proj"], use_dora=True))
    embedding = get_peft_model(shared_copy(base), LoraConfig(r=2, target_modules=["embed_tokens"]))
    assert not groupable(dora) and not groupable(embedding)


def test_equal_length_rows_give_each_client_its_own_pass_bit_for_bit(
    base: torch.nn.Module, clients: list[torch.nn.Module]
) -> None:
    """The serve benchmark's shape (each client's rows as long as every other's, no shared
    prefix): no rounding difference at all, so training together stays its solo run step after step."""
    rng = random.Random(5)
    batches = [[[rng.randrange(1, 1500) for _ in range(16)] for _ in range(2)] for _ in clients]
    alone = []
    for model, inputs_D in zip(clients, batches, strict=True):
        model.zero_grad(set_to_none=True)
        scored = sequence_logprobs(model, inputs_D, _targets(inputs_D), 0)
        _weights(scored.logprobs_D).backward()
        alone.append((torch.cat(scored.logprobs_D).detach(), _gradients(model)))
        model.zero_grad(set_to_none=True)
    inputs_D = [tokens for batch in batches for tokens in batch]
    groups = AdapterGroups(
        shared_copy(base).eval(),
        _adapters(clients),
        [_head(model) for model in clients],
        [g for g, batch in enumerate(batches) for _ in batch],
        list(map(len, inputs_D)),
    )
    scored = sequence_logprobs(groups.host, inputs_D, _targets(inputs_D), 0, groups=groups)
    torch.stack([_weights(scored.logprobs_D[2 * g : 2 * g + 2]) for g in range(len(clients))]).sum().backward()
    for g, model in enumerate(clients):
        assert torch.equal(torch.cat(scored.logprobs_D[2 * g : 2 * g + 2]).detach(), alone[g][0])
        grads = _gradients(model)
        assert grads.keys() == alone[g][1].keys()
        assert all(torch.equal(grad, alone[g][1][name]) for name, grad in grads.items())
        model.zero_grad(set_to_none=True)


@given(st.lists(st.integers(0, 3), min_size=1, max_size=40), st.sets(st.integers(0, 3), min_size=1), st.integers(1, 5))
def test_routing_gathers_its_members_positions_and_adds_back_at_them(
    groups: list[int], members: set[int], width: int
) -> None:
    groups_P = torch.tensor(groups)
    routing = Routing.of(groups_P, tuple(sorted(members)))
    x_PI = torch.randn(len(groups), width)
    x_GMI = routing.gather(x_PI)
    for k, g in enumerate(routing.members):
        mine = x_PI[groups_P == g]
        torch.testing.assert_close(x_GMI[k, : len(mine)], mine)  # in position order
    delta_GMO = torch.randn(len(members), routing.tokens, 3)
    out = routing.add(torch.ones(len(groups), 3), delta_GMO)
    for g in range(4):
        places = (groups_P == g).nonzero().flatten()
        added = delta_GMO[routing.members.index(g), : len(places)] if g in members else 0
        torch.testing.assert_close(out[places], torch.ones(len(places), 3) + added)  # others: nothing added
