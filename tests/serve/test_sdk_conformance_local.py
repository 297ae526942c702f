"""The calls whose answer depends on a real model, and the `tinker` CLI, against
`kitchen serve --backend local` on the embedded tiny models: exported weights that
`tinker checkpoint download` fetches, the LoRA layer choice in the adapters, greedy and truncated
sampling, top-k / target / alternative-token logprobs against the model's own, [T, K]
cross-entropy against K one-target passes, image chunks on the vision-language tiny model. They
fill the local column of docs/reference/tinker-sdk-conformance.md.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pyrage
import pytest
import tinker
from PIL import Image
from safetensors import safe_open
from tinker import types
from tinker.cli.__main__ import main_cli

from tests.serve.conformance import TABLE, Answer, Check, cell_text, read_table, run_checks, works, write_table
from tests.serve.server_process import API_KEY, ServerProcess

pytestmark = pytest.mark.slow  # a local server on the tiny models (and the vision one), and a process per CLI call

BASE, VISION = "tiny", "tiny-vl"
TOKENS = [5, 17, 99, 230, 41, 8, 77, 300, 12, 64]
CHECKS: dict[str, Check] = {}


def check(*names: str) -> Any:
    def register(function: Check) -> Check:
        for name in names:
            CHECKS[name] = function
        return function

    return register


def sft_datum(tokens: list[int]) -> types.Datum:
    n = len(tokens) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=tokens[1:], dtype="int64", shape=[n]),
            "weights": types.TensorData(data=[1.0] * n, dtype="float32", shape=[n]),
        },
    )


@dataclass
class Local:
    server: ServerProcess
    service: tinker.ServiceClient
    rest: tinker.RestClient
    training: tinker.TrainingClient
    state_path: str
    workdir: Path
    made: dict[str, Any] = field(default_factory=dict)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "TINKER_BASE_URL": self.server.url, "TINKER_API_KEY": API_KEY}
        env["HF_HUB_OFFLINE"] = "1"
        command = [sys.executable, "-m", "tinker.cli", *args]
        return subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=600, check=False, cwd=self.workdir
        )


def download(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:  # a plain GET: the link is the credential
        return bytes(response.read())


@check(
    "TrainingClient.save_weights_external",
    "TrainingClient.save_weights_external_async",
    "RestClient.get_external_weights_urls",
    "RestClient.get_external_weights_urls_async",
)
def _external(ctx: Local) -> Answer:
    path = ctx.training.save_weights_external("exported", ttl_seconds=7200).result().path
    assert path == f"tinker://{ctx.training.model_id}/external_weights/exported"
    urls = ctx.rest.get_external_weights_urls(path).result()
    config = json.loads(download(urls.urls["adapter_config.json"]))
    assert config["r"] == 4 and config["peft_type"] == "LORA"
    weights = ctx.workdir / "adapter.safetensors"
    weights.write_bytes(download(urls.urls["adapter_model.safetensors"]))
    with safe_open(str(weights), "pt") as tensors:
        assert any("lora_A" in key for key in tensors.keys())  # noqa: SIM118  # safe_open has no __iter__
    identity = pyrage.x25519.Identity.generate()
    recipient = str(identity.to_public())
    sealed = ctx.training.save_weights_external("sealed", age_encryption_recipients=[recipient]).result()
    files = ctx.rest.get_external_weights_urls(sealed.path).result().urls
    assert files and all(name.endswith(".age") for name in files)
    config = json.loads(pyrage.decrypt(download(files["adapter_config.json.age"]), [identity]))
    assert config["r"] == 4
    with pytest.raises(tinker.BadRequestError, match="not an age or SSH public key"):
        ctx.training.save_weights_external("bad", age_encryption_recipients=["age1nonsense"]).result()
    ctx.made["external"] = path
    return works("a PEFT adapter behind signed links; encrypted to age recipients as asked (.age files)")


@check("ServiceClient.create_lora_training_client", "RestClient.get_weights_info_by_tinker_path")
def _layers(ctx: Local) -> Answer:
    chosen = ctx.service.create_lora_training_client(BASE, rank=4, train_mlp=False, train_unembed=False).result()
    chosen.forward_backward([sft_datum(TOKENS)], "cross_entropy").result()
    chosen.optim_step(types.AdamParams(learning_rate=0.01)).result()
    path = chosen.save_weights_external("attention").result().path
    urls = ctx.rest.get_external_weights_urls(path).result().urls
    targets = set(json.loads(download(urls["adapter_config.json"]))["target_modules"])
    assert targets and all(name.split(".")[-1] in {"q_proj", "k_proj", "v_proj", "o_proj"} for name in targets)
    every = ctx.rest.get_external_weights_urls(ctx.made["external"]).result().urls
    assert "lm_head" in json.loads(download(every["adapter_config.json"]))["target_modules"]  # train_unembed=True
    info = ctx.rest.get_weights_info_by_tinker_path(chosen.save_state("s").result().path).result()
    assert (info.train_attn, info.train_mlp, info.train_unembed) == (True, False, False)
    return works("LoRA adapters on the chosen layers only (train_attn / train_mlp / train_unembed)")


@check("SamplingClient.sample")
def _sample(ctx: Local) -> Answer:
    sampler = ctx.training.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(TOKENS)
    greedy = sampler.sample(
        prompt, 2, types.SamplingParams(max_tokens=5, temperature=0.0), topk_sample_logprobs=2
    ).result()
    assert greedy.sequences[0].tokens == greedy.sequences[1].tokens
    for sequence in greedy.sequences:
        assert sequence.topk_logprobs is not None
        assert [row[0][0] for row in sequence.topk_logprobs if row] == sequence.tokens  # the argmax each step
    top1 = sampler.sample(prompt, 2, types.SamplingParams(max_tokens=5, seed=3, top_k=1)).result()
    assert all(s.tokens == greedy.sequences[0].tokens for s in top1.sequences)
    full = sampler.compute_logprobs(prompt).result()
    top = sampler.sample(
        prompt,
        1,
        types.SamplingParams(max_tokens=1),
        include_prompt_logprobs=True,
        topk_prompt_logprobs=4,
        target_prompt_logprobs=types.TensorData(data=TOKENS[1:], dtype="int64", shape=[9, 1]),
        prompt_alt_tokens_k=3,
    ).result()
    assert top.prompt_logprobs == pytest.approx(full, abs=1e-4)
    targets = top.target_prompt_logprobs
    assert targets is not None and targets.to_torch()[:, 0].tolist() == pytest.approx(full[1:], abs=1e-4)
    assert top.topk_prompt_logprobs is not None
    for row, actual in zip(top.topk_prompt_logprobs[1:], full[1:], strict=True):
        assert row is not None and len(row) == 4 and row[0][1] >= row[-1][1] and row[0][1] >= (actual or 0.0) - 1e-4
    alternatives = top.prompt_alt_tokens
    assert alternatives is not None and alternatives.tokens.shape == [9, 3]
    eos = ctx.training.get_tokenizer().eos_token_id
    long = sampler.sample(prompt, 4, types.SamplingParams(max_tokens=200, seed=5)).result()
    assert all(s.tokens[-1] == eos for s in long.sequences if s.stop_reason == "stop")
    return works("temperature 0 greedy, top_k; top-k, target and alternative-token logprobs of the model; EOS stops")


@check("TrainingClient.forward")
def _forward_2d(ctx: Local) -> Answer:
    columns = [TOKENS[1:], [7] * 9]
    wide = types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(
                data=[c[t] for t in range(9) for c in columns], dtype="int64", shape=[9, 2]
            ),
            "weights": types.TensorData(data=[1.0, 0.25] * 9, dtype="float32", shape=[9, 2]),
        },
    )
    grid = ctx.training.forward([wide], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_torch()
    for k, column in enumerate(columns):
        single = types.Datum(
            model_input=types.ModelInput.from_ints(TOKENS[:-1]),
            loss_fn_inputs={
                "target_tokens": types.TensorData(data=column, dtype="int64", shape=[9]),
                "weights": types.TensorData(data=[1.0] * 9, dtype="float32", shape=[9]),
            },
        )
        one = ctx.training.forward([single], "cross_entropy").result()
        assert grid[:, k].tolist() == pytest.approx(one.loss_fn_outputs[0]["logprobs"].tolist(), abs=1e-5)
    return works("[T, K] cross-entropy: each column's logprobs equal a one-target pass's")


def vision_datum(tokenizer: Any) -> types.Datum:
    """A picture and a question, rendered for the vision tiny model as its renderer does."""
    from train_core.renderers.registry import get_renderer
    from train_core.supervised import datum_from_model_input
    from train_core.types import EncodedTextChunk, ImageChunk

    picture = Image.new("RGB", (40, 40), "red")
    conversation: list[Any] = [
        {"role": "user", "content": [{"type": "image", "image": picture}, {"type": "text", "text": "Colour?"}]},
        {"role": "assistant", "content": "red"},
    ]
    model_input, weights = get_renderer("qwen3_vl_instruct", tokenizer).build_supervised_example(conversation)
    datum = datum_from_model_input(model_input, weights)
    chunks: list[types.ModelInputChunk] = []
    for chunk in datum.model_input.chunks:
        if isinstance(chunk, ImageChunk):
            chunks.append(types.ImageChunk(data=chunk.data, format=chunk.format, expected_tokens=chunk.expected_tokens))
        else:
            assert isinstance(chunk, EncodedTextChunk)
            chunks.append(types.EncodedTextChunk(tokens=list(chunk.tokens)))
    inputs = {
        name: types.TensorData(data=list(t.data), dtype=t.dtype, shape=list(t.shape))
        for name, t in datum.loss_fn_inputs.items()
    }
    return types.Datum(model_input=types.ModelInput(chunks=chunks), loss_fn_inputs=inputs)


@check("TrainingClient.forward_backward")
def _images(ctx: Local) -> Answer:
    training = ctx.service.create_lora_training_client(VISION, rank=4).result()
    datum = vision_datum(training.get_tokenizer())
    before = training.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    for _ in range(3):
        training.forward_backward([datum], "cross_entropy")
        training.optim_step(types.AdamParams(learning_rate=0.05))
    after = training.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    assert after < before
    sampler = training.save_weights_and_get_sampling_client().result()
    sampled = sampler.sample(datum.model_input, 1, types.SamplingParams(max_tokens=3, seed=0)).result()
    assert len(sampled.sequences[0].tokens) >= 1
    image = next(c for c in datum.model_input.chunks if isinstance(c, types.ImageChunk))
    picture = ctx.workdir / "picture.png"
    picture.write_bytes(image.data)
    pointed = types.ModelInput(
        chunks=[
            types.ImageAssetPointerChunk(format="png", location=picture.as_uri(), expected_tokens=image.expected_tokens)
            if isinstance(c, types.ImageChunk)
            else c
            for c in datum.model_input.chunks
        ]
    )
    again = sampler.sample(pointed, 1, types.SamplingParams(max_tokens=3, seed=0)).result()
    assert again.sequences[0].tokens == sampled.sequences[0].tokens  # the same picture, read from the file
    remote = types.ImageAssetPointerChunk(format="png", location="https://example.com/a.png", expected_tokens=4)
    with pytest.raises(tinker.BadRequestError, match="network"):
        sampler.sample(
            types.ModelInput(chunks=[types.EncodedTextChunk(tokens=[1]), remote]), 1, types.SamplingParams(max_tokens=1)
        ).result()
    with pytest.raises(tinker.BadRequestError) as info:
        sampler.sample(
            types.ModelInput(chunks=[types.EncodedTextChunk(tokens=[1]), types.DmelChunk(dmel=b"\0\0")]),
            1,
            types.SamplingParams(max_tokens=1),
        ).result()
    assert "audio" in str(info.value)
    return works("image chunks (and image files by path) train and sample on the vision model; DmelChunk audio refused")


# --- the tinker CLI ---


def cli_commands() -> list[str]:
    """`group command` for every command of the `tinker` CLI (and its lone top-level ones)."""
    context = click.Context(main_cli)
    found = []
    for name in main_cli.list_commands(context):
        command = main_cli.get_command(context, name)
        if isinstance(command, click.Group):
            found += [f"tinker {name} {sub}" for sub in command.list_commands(context)]
        else:
            found.append(f"tinker {name}")
    return sorted(found)


def cli_ok(ctx: Local, *args: str) -> str:
    result = ctx.cli("--format", "json", *args)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout


@check("tinker checkpoint list", "tinker checkpoint info", "tinker run list", "tinker run info")
def _cli_read(ctx: Local) -> Answer:
    listed = json.loads(cli_ok(ctx, "checkpoint", "list", "--run-id", ctx.training.model_id))
    assert ctx.state_path in json.dumps(listed)
    info = json.loads(cli_ok(ctx, "checkpoint", "info", ctx.state_path))
    assert ctx.state_path in json.dumps(info)
    assert ctx.training.model_id in cli_ok(ctx, "run", "list")
    assert BASE in cli_ok(ctx, "run", "info", ctx.training.model_id)
    return works("listed as the SDK's REST calls return them")


@check("tinker checkpoint download")
def _cli_download(ctx: Local) -> Answer:
    out = ctx.workdir / "downloads"
    cli_ok(ctx, "checkpoint", "download", ctx.state_path, "--output", str(out))
    folder = out / ctx.state_path.removeprefix("tinker://").replace("/", "_")
    assert (folder / "adapter_config.json").is_file() and (folder / "adapter_model.safetensors").is_file()
    cli_ok(ctx, "checkpoint", "download", ctx.made["external"], "--output", str(out))
    return works("a training checkpoint exported and fetched as a PEFT adapter, then its export deleted")


@check(
    "tinker checkpoint publish", "tinker checkpoint unpublish", "tinker checkpoint set-ttl", "tinker checkpoint delete"
)
def _cli_change(ctx: Local) -> Answer:
    path = ctx.training.save_state("for-cli").result().path
    cli_ok(ctx, "checkpoint", "publish", path)
    assert json.loads(cli_ok(ctx, "checkpoint", "info", path))
    cli_ok(ctx, "checkpoint", "unpublish", path)
    cli_ok(ctx, "checkpoint", "set-ttl", path, "--ttl", "7200")
    cli_ok(ctx, "checkpoint", "delete", path, "--yes")
    with pytest.raises(tinker.NotFoundError):
        ctx.rest.get_weights_info_by_tinker_path(path).result()
    return works("as the REST calls they make")


@check("tinker session export-trace")
def _cli_trace(ctx: Local) -> Answer:
    cli_ok(ctx, "session", "export-trace", ctx.service.holder.get_session_id())
    return works("the session's trace file, downloaded")


@check("tinker billing usage", "tinker billing checkpoint-storage", "tinker model list", "tinker version")
def _cli_reports(ctx: Local) -> Answer:
    end = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    start = end - dt.timedelta(hours=2)
    assert json.loads(cli_ok(ctx, "billing", "usage", start.isoformat(), end.isoformat())) is not None
    assert "checkpoint" in cli_ok(ctx, "billing", "checkpoint-storage")
    assert BASE in cli_ok(ctx, "model", "list")
    cli_ok(ctx, "version")
    return works("an empty billing report, the store's checkpoint storage, the served models")


@check("tinker auth login", "tinker auth status", "tinker auth whoami", "tinker auth logout")
def _cli_auth(ctx: Local) -> Answer:
    """With its own home folder, so the machine's stored credentials are left alone."""
    home = ctx.workdir / "home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "TINKER_BASE_URL": ctx.server.url}
    env.pop("TINKER_API_KEY", None)

    def tinker_cli(*args: str, stdin: str = "") -> str:
        result = subprocess.run(
            [sys.executable, "-m", "tinker.cli", *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        return result.stdout

    assert "Stored API key" in tinker_cli("auth", "login", stdin=API_KEY + "\n")
    assert (home / ".tinker" / "credentials.json").is_file()
    tinker_cli("auth", "status")
    assert "tml:user:" in tinker_cli("auth", "whoami")
    tinker_cli("auth", "logout")
    return works("the pasted key is checked (GET /api/v1/auth/apikey/me) and stored; status reaches the server")


@check("tinker checkpoint push-hf")
def _cli_push(ctx: Local) -> Answer:
    result = ctx.cli("checkpoint", "push-hf", ctx.state_path, "--repo", "kitchen/no-network")
    assert result.returncode != 0
    return Answer(
        "client-side",
        "downloads the checkpoint (as `download` does), then uploads to the Hugging Face hub (no network here)",
    )


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Answer | BaseException]]:
    folder = tmp_path_factory.mktemp("conformance_local")
    models = folder / "models.yaml"
    models.write_text(f"{BASE}: tiny\n{VISION}: tiny-vl\n", encoding="utf-8")
    server = ServerProcess(folder / "store", backend="local", extra=["--models", str(models)]).start()
    service = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    training = service.create_lora_training_client(BASE, rank=4, seed=0).result()
    training.forward_backward([sft_datum(TOKENS)], "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=0.01)).result()
    state = training.save_state("state").result().path
    context = Local(server, service, tinker.RestClient(base_url=server.url, api_key=API_KEY), training, state, folder)
    yield run_checks(CHECKS, context)
    service.close("success").result()
    server.stop()


@pytest.mark.parametrize("call", sorted(CHECKS))
def test_the_call_works_or_is_refused_by_name(call: str, answers: dict[str, Answer | BaseException]) -> None:
    answer = answers[call]
    if isinstance(answer, BaseException):
        raise answer


def test_every_cli_command_has_a_check() -> None:
    missing = sorted(set(cli_commands()) - set(CHECKS))
    assert not missing, f"tinker {tinker.__version__}'s CLI has commands without a conformance check: {missing}"


def test_the_docs_table_shows_these_answers(answers: dict[str, Answer | BaseException]) -> None:
    rows = read_table() if TABLE.exists() else {}
    got = {call: cell_text(a) for call, a in answers.items() if isinstance(a, Answer)}
    if os.environ.get("KITCHEN_WRITE_CONFORMANCE") == "1":
        for call, cell in got.items():
            rows.setdefault(call, {"noop": "-", "local": "-"})["local"] = cell
        write_table(rows)
    assert {call: rows.get(call, {}).get("local") for call in got} == got, (
        "docs/reference/tinker-sdk-conformance.md is out of date: rerun with KITCHEN_WRITE_CONFORMANCE=1"
    )
