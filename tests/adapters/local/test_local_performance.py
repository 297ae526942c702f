"""The local backend's speed and memory features compute what the plain paths compute.

Micro-batching, gradient checkpointing and the fused optimizer must not change results beyond
float rounding; bf16 must still train; the sampler-model pool must keep every sampling client a
snapshot of its own weights.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

from adapters.local import LocalBackend
from adapters.local.model_loading import LoraOptions
from adapters.local.training_client import LocalTrainingClient, TrainingOptions, make_adamw, microbatches
from train_core.rl.policy_objective import compute_kl_sample_train
from train_core.types import AdamParams, Datum, ModelInput, SamplingParams, TensorData


def _gradients(client: object) -> list[torch.Tensor]:
    assert isinstance(client, LocalTrainingClient)
    return [p.grad.detach().clone() for p in client._params if p.grad is not None]


def _run_gradients(
    tmp_path: Path, data: list[Datum], loss_fn: str, dtype: str, **options: object
) -> tuple[list[torch.Tensor], list[list[float]], dict[str, float]]:
    backend = LocalBackend(tmp_path, device="cpu", dtype=dtype, training=TrainingOptions(**options))  # type: ignore[arg-type]

    async def run() -> tuple[list[torch.Tensor], list[list[float]], dict[str, float]]:
        client = await backend.create_training_client("tiny")
        out = await (await client.forward_backward(data, loss_fn))
        logprobs = [list(o["logprobs"].data) for o in out.loss_fn_outputs]
        return _gradients(client), logprobs, out.metrics

    try:
        return asyncio.run(run())
    finally:
        asyncio.run(backend.close())


def test_microbatches_sort_by_length_and_respect_the_token_budget() -> None:
    lengths = [5, 30, 6, 29, 7, 28]
    batches = microbatches(lengths, 60)
    assert sorted(i for b in batches for i in b) == list(range(6))
    for batch in batches:
        assert len(batch) * max(lengths[i] for i in batch) <= 60
    assert [sorted(lengths[i] for i in b) for b in batches] == [[5, 6, 7], [28, 29], [30]]
    assert microbatches(lengths, None) == [list(range(6))]
    assert microbatches(lengths, 10_000) == [list(range(6))]
    assert microbatches([100, 3], 10) == [[1], [0]]  # a datum over the budget runs alone


@pytest.mark.parametrize(("dtype", "tolerance"), [("float64", 1e-10), ("float32", 1e-5)])
@pytest.mark.parametrize("loss_fn", ["cross_entropy", "gspo"])
def test_microbatched_gradients_equal_one_batch(
    tmp_path: Path, sl_batch: list[Datum], rl_batch: list[Datum], dtype: str, tolerance: float, loss_fn: str
) -> None:
    data = (sl_batch if loss_fn == "cross_entropy" else rl_batch) * 2
    whole, whole_lp, whole_metrics = _run_gradients(tmp_path, data, loss_fn, dtype)
    split, split_lp, split_metrics = _run_gradients(tmp_path, data, loss_fn, dtype, max_tokens_per_microbatch=40)
    assert len(whole) == len(split) > 0
    scale = max(float(g.abs().max()) for g in whole)
    for a, b in zip(whole, split, strict=True):
        assert float((a - b).abs().max()) <= tolerance * max(scale, 1.0)
    for a_row, b_row in zip(whole_lp, split_lp, strict=True):  # outputs come back in datum order
        assert a_row == pytest.approx(b_row, abs=tolerance * 10)
    assert split_metrics["loss:sum"] == pytest.approx(whole_metrics["loss:sum"], rel=tolerance * 10)
    # Each reports its packed rows' padding (which pads less depends on how each batch packs: with
    # prefix trees the one batch shares more and pads less here, 0.06 against 0.09).
    assert 0 <= split_metrics["padding_fraction:mean"] < 1 and 0 <= whole_metrics["padding_fraction:mean"] < 1


def test_gradient_checkpointing_gives_the_same_gradients(tmp_path: Path, sl_batch: list[Datum]) -> None:
    plain, plain_lp, _ = _run_gradients(tmp_path, sl_batch, "cross_entropy", "float64")
    checkpointed, ckpt_lp, _ = _run_gradients(
        tmp_path, sl_batch, "cross_entropy", "float64", gradient_checkpointing=True
    )
    for a, b in zip(plain, checkpointed, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert plain_lp == ckpt_lp


@pytest.mark.parametrize("checkpointing", [False, True])
def test_gradient_checkpointing_recomputes_layers_in_the_backward_pass(
    tmp_path: Path, sl_batch: list[Datum], checkpointing: bool
) -> None:
    backend = LocalBackend(tmp_path, device="cpu", training=TrainingOptions(gradient_checkpointing=checkpointing))

    async def run() -> tuple[int, int]:
        client = await backend.create_training_client("tiny")
        calls = []
        layer = client._model.model.layers[0].input_layernorm  # type: ignore[union-attr,index]  # recomputed first
        layer.register_forward_hook(lambda *_: calls.append(1))
        await (await client.forward(sl_batch, "cross_entropy"))
        forward_only = len(calls)
        await (await client.forward_backward(sl_batch, "cross_entropy"))
        return forward_only, len(calls) - forward_only

    forward_only, with_backward = asyncio.run(run())
    asyncio.run(backend.close())
    assert forward_only == 1
    assert with_backward == (2 if checkpointing else 1)


def _custom_loss_gradients(tmp_path: Path, data: list[Datum], checkpointing: bool) -> list[torch.Tensor]:
    """LoRA with dropout, a custom loss, the dropout masks drawn from one seed."""
    training = TrainingOptions(train_mode=True, gradient_checkpointing=checkpointing)
    backend = LocalBackend(tmp_path, device="cpu", dtype="float64", training=training, lora=LoraOptions(dropout=0.5))

    def loss_fn(batch: Sequence[Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        return -torch.stack([(lp * (i + 1)).sum() for i, lp in enumerate(logprobs_D)]).sum(), {}

    async def run() -> list[torch.Tensor]:
        client = await backend.create_training_client("tiny", lora_rank=4)
        torch.manual_seed(0)
        await (await client.forward_backward_custom(data, loss_fn))
        return _gradients(client)

    try:
        return asyncio.run(run())
    finally:
        asyncio.run(backend.close())


def test_a_custom_loss_backward_recomputes_checkpointed_layers_with_their_dropout(
    tmp_path: Path, sl_batch: list[Datum]
) -> None:
    """The recompute of a checkpointed layer must run in train mode, like its forward: in eval mode
    it would drop no activations and the gradients would belong to another network."""
    plain = _custom_loss_gradients(tmp_path, sl_batch, checkpointing=False)
    checkpointed = _custom_loss_gradients(tmp_path, sl_batch, checkpointing=True)
    assert len(plain) == len(checkpointed) > 0
    for a, b in zip(plain, checkpointed, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_fused_adamw_computes_the_default_update() -> None:
    generator = torch.Generator().manual_seed(0)
    shapes = [(64, 32), (32,), (7, 5, 3)]
    start = [torch.randn(s, generator=generator) for s in shapes]
    grads = [[torch.randn(s, generator=generator) for s in shapes] for _ in range(3)]

    def train(make: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]) -> list[torch.Tensor]:
        params = [torch.nn.Parameter(t.clone()) for t in start]
        optimizer = make(params)
        for group in optimizer.param_groups:
            group.update(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
        for step_grads in grads:
            for p, g in zip(params, step_grads, strict=True):
                p.grad = g.clone()
            optimizer.step()
        return [p.detach() for p in params]

    fused = train(make_adamw)
    assert make_adamw([torch.nn.Parameter(torch.zeros(1))]).defaults.get("fused") is True
    default = train(lambda params: torch.optim.AdamW(params, lr=0.0, foreach=False))
    for a, b in zip(fused, default, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
        assert not torch.equal(a, start[0]) if a.shape == start[0].shape else True


def test_bfloat16_training_lowers_the_nll(tmp_path: Path, sl_batch: list[Datum]) -> None:
    backend = LocalBackend(tmp_path, device="cpu", dtype="bfloat16")

    async def run() -> list[float]:
        client = await backend.create_training_client("tiny")
        losses = []
        for _ in range(6):
            out = await (await client.forward_backward(sl_batch, "cross_entropy"))
            losses.append(out.metrics["loss:sum"])
            assert all(o["logprobs"].dtype == "float32" for o in out.loss_fn_outputs)
            await (await client.optim_step(AdamParams(learning_rate=3e-3)))
        return losses

    losses = asyncio.run(run())
    asyncio.run(backend.close())
    assert losses[-1] < 0.8 * losses[0]


def test_old_sampling_clients_keep_their_weights_after_refreshes(backend: LocalBackend, sl_batch: list[Datum]) -> None:
    prompt = ModelInput.from_ints(sl_batch[1].model_input.to_ints())

    async def run() -> None:
        client = await backend.create_training_client("tiny")
        first = await client.save_weights_and_get_sampling_client()
        before = await first.compute_logprobs(prompt)
        for _ in range(3):  # train, refresh; the pool must not hand `first`'s model out again
            await client.forward_backward(sl_batch, "cross_entropy")
            await client.optim_step(AdamParams(learning_rate=1e-2))
            latest = await client.save_weights_and_get_sampling_client()
            assert await first.compute_logprobs(prompt) == before
        assert await latest.compute_logprobs(prompt) != before
        pool = client._samplers
        assert pool is not None  # kitchen's sampler samples: it keeps a pool
        copies = pool.copies_made
        # Dropped clients free their models: refreshes reuse them instead of copying again.
        del latest
        gc.collect()
        for _ in range(3):
            await client.forward_backward(sl_batch, "cross_entropy")
            await client.optim_step(AdamParams(learning_rate=1e-2))
            newest = await client.save_weights_and_get_sampling_client()
            trained = await (await client.forward([_scoring_datum(prompt)], "cross_entropy"))
            expected = [None, *trained.loss_fn_outputs[0]["logprobs"].data]
            assert await newest.compute_logprobs(prompt) == pytest.approx(expected, abs=1e-5)
            del newest
        assert pool.copies_made == copies
        assert pool.size <= 3
        assert await first.compute_logprobs(prompt) == before

    asyncio.run(run())


def _scoring_datum(prompt: ModelInput) -> Datum:
    tokens = prompt.to_ints()
    return Datum(
        ModelInput.from_ints(tokens[:-1]),
        {
            "target_tokens": TensorData.from_list(tokens[1:], "int64"),
            "weights": TensorData.from_list([1.0] * (len(tokens) - 1), "float32"),
        },
    )


def test_on_policy_samples_have_near_zero_kl_against_training_logprobs(backend: LocalBackend) -> None:
    async def run() -> dict[str, float]:
        client = await backend.create_training_client("tiny")
        sampler = await client.save_weights_and_get_sampling_client()
        prompt = [1, 2, 3, 4, 5]
        results = await asyncio.gather(
            *(
                sampler.sample(ModelInput.from_ints(prompt), 2, SamplingParams(max_tokens=8, seed=seed))
                for seed in range(4)
            )
        )
        data = []
        for result in results:
            for seq in result.sequences:
                tokens = prompt + seq.tokens
                n = len(tokens) - 1
                mask = [0.0] * (len(prompt) - 1) + [1.0] * len(seq.tokens)
                sampled = [0.0] * (len(prompt) - 1) + seq.logprobs
                data.append(
                    Datum(
                        ModelInput.from_ints(tokens[:-1]),
                        {
                            "target_tokens": TensorData.from_list(tokens[1:], "int64"),
                            "logprobs": TensorData.from_list(sampled, "float32"),
                            "advantages": TensorData.from_list([0.0] * n, "float32"),
                            "mask": TensorData.from_list(mask, "float32"),
                        },
                    )
                )
        out = await (await client.forward(data, "importance_sampling"))
        return compute_kl_sample_train(data, [o["logprobs"].to_torch() for o in out.loss_fn_outputs])

    metrics = asyncio.run(run())
    assert abs(metrics["optim/kl_sample_train_v2"]) < 1e-3
    assert abs(metrics["optim/kl_sample_train_v1"]) < 1e-3


def test_tensor_data_keeps_tensors_and_converts_lazily() -> None:
    source = torch.tensor([0.5, -1.25, 3.0])
    tensor = TensorData.from_torch(source)
    source.add_(1.0)  # the caller's tensor is not shared
    assert tensor.data == (0.5, -1.25, 3.0)
    assert tensor.to_torch() is tensor.to_torch()  # converted once
    assert tensor == TensorData.from_list([0.5, -1.25, 3.0], "float32")
    ints = TensorData.from_list([1, 2, 3], "int64")
    assert ints.to_torch().dtype == torch.int64 and ints.shape == (3,) and ints.tolist() == [1, 2, 3]
    assert TensorData.from_torch(torch.arange(6).reshape(2, 3)).shape == (2, 3)


def test_tensor_data_concat_is_the_numbers_in_order_whatever_each_holds() -> None:
    lists = [TensorData.from_list([1.0, 2.5], "float32"), TensorData.from_list([-3.0], "float32")]
    tensors = [TensorData.from_torch(torch.tensor([[4.0, 5.0]])), TensorData.from_torch(torch.tensor([6.0]))]
    expected = [1.0, 2.5, -3.0, 4.0, 5.0, 6.0]
    for items in (lists + tensors, tensors + lists, lists, tensors):
        got = TensorData.concat(items, "float32")
        assert got.dtype == torch.float32 and got.shape == (sum(len(i.data) for i in items),)
        assert got.tolist() == [x for i in items for x in i.data]
    assert TensorData.concat(lists + tensors, "float32").tolist() == expected
    assert TensorData.concat([TensorData.from_list([1, 2], "int64")], "int64").dtype == torch.int64


def test_lora_options_choose_alpha_dropout_and_target_layers() -> None:
    from adapters.local.model_loading import LoraOptions, add_lora, load_base_model
    from kitchen.engine.errors import ConfigError

    model = add_lora(load_base_model("tiny", torch.float32), 4, 0, LoraOptions(16, 0.1, ("q_proj", "v_proj")))
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".q_proj." in name or ".v_proj." in name for name in trainable)
    lora_layer = next(m for name, m in model.named_modules() if name.endswith("q_proj") and hasattr(m, "scaling"))
    assert lora_layer.scaling["default"] == 16 / 4
    assert isinstance(lora_layer.lora_dropout["default"], torch.nn.Dropout)
    with pytest.raises(ConfigError, match="lora_target_modules"):
        add_lora(load_base_model("tiny", torch.float32), 4, 0, LoraOptions(target_modules=("no_such_layer",)))


def test_local_settings_reach_the_backend(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from adapters.local.registration import LocalSettings, create
    from train_core.losses import LOSS_SPECS

    settings = LocalSettings.model_validate(
        {
            "dtype": "bfloat16",
            "gradient_checkpointing": True,
            "max_tokens_per_microbatch": 64,
            "lora_alpha": 8,
            "lora_dropout": 0.05,
        }
    )
    losses = {"cross_entropy": LOSS_SPECS["cross_entropy"]}
    backend = create(SimpleNamespace(model_name="tiny", seed=0, lora_rank=32), settings, tmp_path, losses)
    assert isinstance(backend, LocalBackend)
    assert backend._losses is losses
    assert backend._dtype == torch.bfloat16
    assert backend._training_options == TrainingOptions(64, True, True, False)
    assert (backend._lora.alpha, backend._lora.dropout, backend._lora.target_modules) == (8, 0.05, "all-linear")
