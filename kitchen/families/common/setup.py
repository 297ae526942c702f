"""Stages that set a run up and tear it down: tokenizer, renderer, the training client, a frozen
or external model to score against (a reference, a teacher), and releasing the backend."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kitchen.engine.config.run import RunConfig
from kitchen.engine.config.sections import ConfigRef
from kitchen.engine.context import Context
from kitchen.engine.errors import ConfigError, StageError
from kitchen.engine.ports import SamplingClient, ServiceBackend, Tokenizer, TrainingClient
from kitchen.engine.renderers import get_renderer, renderer_roles
from kitchen.engine.runs.checkpoints import resolve_sampler_path
from kitchen.engine.stage import Persisted, Stage
from kitchen.families.common.settings import OtherModel, RendererSettings
from train_core.renderers.base import Renderer
from train_core.renderers.registry import recommended_renderer


@dataclass(frozen=True)
class TokenizerOut:
    tokenizer: Tokenizer


class GetTokenizer(Stage):
    """The base model's tokenizer, from the backend (the embedded one for `model_name: tiny`)."""

    calls = (ServiceBackend.get_tokenizer,)

    async def run(self, service: ServiceBackend, config: RunConfig) -> TokenizerOut:
        return TokenizerOut(service.get_tokenizer(config.model_name))


def renderer_name(config: RunConfig) -> str:
    """The renderer a run uses: the config's `renderer`, or the one recommended for the model."""
    chosen = config.renderer if isinstance(config, RendererSettings) else None
    return str(chosen or recommended_renderer(config.model_name))


def message_roles(config: Any) -> frozenset[str]:
    """The message roles the run's renderer supports, known without loading a tokenizer."""
    return renderer_roles(renderer_name(config))


@dataclass(frozen=True)
class RendererOut:
    renderer: Renderer


class MakeRenderer(Stage):
    """The chat renderer named by `renderer` (checked when the config is loaded), or the one
    recommended for the model."""

    async def run(self, tokenizer: Tokenizer, config: RendererSettings) -> RendererOut:
        try:
            return RendererOut(get_renderer(renderer_name(config), tokenizer))
        except ValueError as exc:
            raise ConfigError(f"renderer: {exc}") from None


@dataclass(frozen=True)
class TrainingClientOut:
    training_client: TrainingClient


class CreateTrainingClient(Stage):
    """A training client: resumed from the last checkpoint (weights + optimizer) when resuming,
    from `load_checkpoint_path` (weights only, fresh optimizer) when set, else from the base model."""

    calls = (ServiceBackend.create_training_client, ServiceBackend.create_training_client_from_state)

    async def run(self, ctx: Context, service: ServiceBackend, config: RunConfig) -> TrainingClientOut:
        if ctx.resume is not None and ctx.resume.state_path:
            client = await service.create_training_client_from_state(ctx.resume.state_path, with_optimizer=True)
            ctx.log.info("training_client.resumed", state_path=ctx.resume.state_path)
        elif config.load_checkpoint_path:
            client = await service.create_training_client_from_state(config.load_checkpoint_path, with_optimizer=False)
            ctx.log.info("training_client.loaded", state_path=config.load_checkpoint_path)
        else:
            client = await service.create_training_client(
                config.model_name, lora_rank=config.lora_rank, seed=config.seed
            )
        return TrainingClientOut(client)


@dataclass(frozen=True)
class ReferenceOut:
    reference_client: SamplingClient
    reference_path: Persisted[str]


class CreateReferenceClient(Stage):
    """A sampling client on a frozen copy of the policy as it is now (DPO's reference, the RL KL
    penalty's), for scoring against a model that training never changes.

    The copy is saved once and its path persisted, so a resumed run, whose policy already holds
    later weights, reopens the same model; a run resumed from a checkpoint that does not record
    that path is refused rather than scored against the wrong model. `keys=` puts it under other
    state keys (e.g. `{"reference_client": "judge_client", "reference_path": "judge_path"}`).
    """

    calls = (TrainingClient.save_weights_for_sampler, ServiceBackend.create_sampling_client)

    async def run(
        self,
        ctx: Context,
        service: ServiceBackend,
        training_client: TrainingClient,
        reference_path: str | None = None,
    ) -> ReferenceOut:
        path_key = self.keys.get("reference_path", "reference_path")
        if reference_path is not None:
            path = reference_path
        elif ctx.resume is not None and ctx.resume.state_path:
            raise StageError(
                f"checkpoint {ctx.resume.name!r} does not record {path_key!r}, so the run cannot resume "
                "against the model it started with; start a new log_path"
            )
        else:
            path = await (await training_client.save_weights_for_sampler(path_key.removesuffix("_path")))
        client = await service.create_sampling_client(model_path=path)
        ctx.log.info("model_client.ready", client=self.keys.get("reference_client", "reference_client"), path=path)
        return ReferenceOut(client, path)


@dataclass(frozen=True)
class OtherModelOut:
    model_client: SamplingClient
    model_path: Persisted[str]


class OpenOtherModel(Stage):
    """A sampling client on the `OtherModel` that `model` refers to (a distillation teacher, a
    learned judge: a base model, or a checkpoint / run directory). Its state keys are named by the
    caller (`client_key`, `path_key`)."""

    calls = (ServiceBackend.create_sampling_client,)

    def __init__(
        self, model: ConfigRef[Any, OtherModel], client_key: str, path_key: str, name: str | None = None
    ) -> None:
        super().__init__(name, keys={"model_client": client_key, "model_path": path_key})
        self.model = model

    def check_inputs(self, config: Any) -> None:
        self.model.of(config)  # a config without the section is a wiring mistake: fail before the run

    async def run(self, ctx: Context, service: ServiceBackend, config: RunConfig) -> OtherModelOut:
        client, path = await open_other_model(service, self.model.of(config), config.model_name)
        ctx.log.info("model_client.ready", client=self.keys["model_client"], path=path)
        return OtherModelOut(client, path)


async def open_other_model(
    service: ServiceBackend, model: OtherModel, default_model_name: str
) -> tuple[SamplingClient, str]:
    """A sampling client on `model` (its checkpoint, else its base model, else the run's), and
    the path or name it was opened from."""
    if model.checkpoint:
        path = resolve_sampler_path(model.checkpoint)
        return await service.create_sampling_client(model_path=path), path
    name = model.model_name or default_model_name
    return await service.create_sampling_client(base_model=name), name


class CheckTokenizerMatch(Stage):
    """Refuse, before any training, another model (a teacher) whose tokenizer differs from the
    trained model's: its logprobs of the student's tokens would score different text."""

    calls = (ServiceBackend.get_tokenizer,)

    def __init__(self, models: Sequence[ConfigRef[Any, OtherModel]], name: str | None = None) -> None:
        super().__init__(name)
        self.models = tuple(models)

    def check_inputs(self, config: Any) -> None:
        for model in self.models:
            model.of(config)

    async def run(self, tokenizer: Tokenizer, service: ServiceBackend, config: RunConfig) -> None:
        for model in self.models:
            model_name = model.of(config).model_name
            if model_name is None or model_name == config.model_name:
                continue
            if not same_tokenizer(tokenizer, service.get_tokenizer(model_name)):
                raise ConfigError(
                    f"{model.dotted(type(config))}.model_name {model_name!r} has a different tokenizer from model_name "
                    f"{config.model_name!r}; a teacher must share the student's tokenizer"
                )


def single_token_ids(tokenizer: Any, texts: Sequence[str], key: str) -> tuple[int, int]:
    """The ids of two different strings that must each encode to exactly one token (a reward
    model's score tokens, a process reward model's label tokens), else a ConfigError naming `key`."""
    ids = []
    for text in texts:
        encoded = tokenizer.encode(text, add_special_tokens=False)
        if len(encoded) != 1:
            raise ConfigError(f"{key}: {text!r} is {len(encoded)} tokens for this tokenizer; give single tokens")
        ids.append(encoded[0])
    if ids[0] == ids[1]:
        raise ConfigError(f"{key}: {texts[0]!r} and {texts[1]!r} are the same token")
    return ids[0], ids[1]


def same_tokenizer(a: Any, b: Any) -> bool:
    """Same vocabulary (token -> id) where the tokenizers expose it, else the same encodings of a
    probe text."""
    if hasattr(a, "get_vocab") and hasattr(b, "get_vocab"):
        return bool(a.get_vocab() == b.get_vocab())
    probe = "The quick brown fox: 12 + 30 = 42.\n<|im_start|>assistant"
    return bool(a.encode(probe, add_special_tokens=False) == b.encode(probe, add_special_tokens=False))


class CloseBackend(Stage):
    """Release backend resources (sessions, threads). Meant for `finally_`: runs after failures too."""

    calls = (ServiceBackend.close,)

    async def run(self, service: ServiceBackend) -> None:
        await service.close()
