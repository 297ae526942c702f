"""Stages that set a run up and tear it down: tokenizer, renderer, the training client, a frozen
or external model to score against (a reference, a teacher), and releasing the backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kitchen.checkpoints import resolve_sampler_path
from kitchen.context import Context
from kitchen.errors import ConfigError, StageError
from kitchen.stage import Stage
from train_core.renderers.registry import get_renderer, recommended_renderer, renderer_roles


class GetTokenizer(Stage):
    """The base model's tokenizer, from the backend (the embedded one for `model_name: tiny`)."""

    writes = ("tokenizer",)
    ports = ("service",)
    calls = ("ServiceBackend.get_tokenizer",)
    config_keys = ("model_name",)

    async def run(self, ctx: Context) -> None:
        ctx["tokenizer"] = ctx.port("service").get_tokenizer(ctx.config.model_name)


def renderer_name(config: Any) -> str:
    """The renderer a run uses: the config's `renderer`, or the one recommended for the model."""
    return str(getattr(config, "renderer", None) or recommended_renderer(config.model_name))


def message_roles(config: Any) -> frozenset[str]:
    """The message roles the run's renderer supports, known without loading a tokenizer."""
    return renderer_roles(renderer_name(config))


class MakeRenderer(Stage):
    """The chat renderer named by `renderer` (checked when the config is loaded), or the one
    recommended for the model."""

    reads = ("tokenizer",)
    writes = ("renderer",)
    config_keys = ("renderer", "model_name")

    async def run(self, ctx: Context) -> None:
        try:
            ctx["renderer"] = get_renderer(renderer_name(ctx.config), ctx["tokenizer"])
        except ValueError as exc:
            raise ConfigError(f"renderer: {exc}") from None


class CreateTrainingClient(Stage):
    """A training client: resumed from the last checkpoint (weights + optimizer) when resuming,
    from `load_checkpoint_path` (weights only, fresh optimizer) when set, else from the base model."""

    writes = ("training_client",)
    ports = ("service",)
    calls = ("ServiceBackend.create_training_client", "ServiceBackend.create_training_client_from_state")
    config_keys = ("model_name", "lora_rank", "seed", "load_checkpoint_path")

    async def run(self, ctx: Context) -> None:
        service = ctx.port("service")
        config = ctx.config
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
        ctx["training_client"] = client


class CreateReferenceClient(Stage):
    """A sampling client on a model that training never changes, for scoring against it: by
    default a frozen copy of the policy as it is now (DPO's reference, the RL KL penalty's); with
    `model_key`, the `OtherModel` at that config path (e.g. "teacher" or "datasets.1.teacher": a
    base model, or a checkpoint / run directory), e.g. a distillation teacher.

    A frozen copy is saved once and its path persisted under `path_key`, so a resumed run, whose
    policy already holds later weights, reopens the same model; a run resumed from a checkpoint
    that does not record that path is refused rather than scored against the wrong model.
    """

    ports = ("service",)
    calls = ("TrainingClient.save_weights_for_sampler", "ServiceBackend.create_sampling_client")

    def __init__(
        self,
        client_key: str = "reference_client",
        path_key: str = "reference_path",
        model_key: str | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name or f"create_{client_key}")
        self.client_key, self.path_key, self.model_key = client_key, path_key, model_key
        self.writes = (client_key, path_key)
        self.persist = (path_key,)
        self.reads = () if model_key else ("training_client",)
        self.config_keys = (model_key.split(".")[0], "model_name") if model_key else ()

    async def run(self, ctx: Context) -> None:
        service = ctx.port("service")
        saved = ctx.get(self.path_key)
        if self.model_key is not None:
            model = config_path(ctx.config, self.model_key)
            if model.checkpoint:
                path = resolve_sampler_path(model.checkpoint)
                client = await service.create_sampling_client(model_path=path)
            else:
                path = model.model_name or ctx.config.model_name
                client = await service.create_sampling_client(base_model=path)
            ctx[self.path_key] = path
        elif saved is not None:
            client = await service.create_sampling_client(model_path=saved)
        elif ctx.resume is not None and ctx.resume.state_path:
            raise StageError(
                f"checkpoint {ctx.resume.name!r} does not record {self.path_key!r}, so the run cannot resume "
                "against the model it started with; start a new log_path"
            )
        else:
            path = await (await ctx["training_client"].save_weights_for_sampler(self.path_key.removesuffix("_path")))
            ctx[self.path_key] = path
            client = await service.create_sampling_client(model_path=path)
        ctx[self.client_key] = client
        ctx.log.info("model_client.ready", client=self.client_key, path=ctx[self.path_key])


def config_path(config: Any, dotted: str) -> Any:
    """The value at a dotted config path: attributes, and list indices for digits."""
    value = config
    for part in dotted.split("."):
        value = value[int(part)] if part.isdigit() else getattr(value, part)
    return value


class CheckTokenizerMatch(Stage):
    """Refuse, before any training, another model (a teacher) whose tokenizer differs from the
    trained model's: its logprobs of the student's tokens would score different text."""

    reads = ("tokenizer",)
    ports = ("service",)
    calls = ("ServiceBackend.get_tokenizer",)

    def __init__(self, model_keys: Sequence[str], name: str | None = None) -> None:
        super().__init__(name)
        self.model_keys = tuple(model_keys)
        self.config_keys = (*sorted({key.split(".")[0] for key in model_keys}), "model_name")

    async def run(self, ctx: Context) -> None:
        ours = ctx["tokenizer"]
        for key in self.model_keys:
            model_name = config_path(ctx.config, key).model_name
            if model_name is None or model_name == ctx.config.model_name:
                continue
            theirs = ctx.port("service").get_tokenizer(model_name)
            if not same_tokenizer(ours, theirs):
                raise ConfigError(
                    f"{key}.model_name {model_name!r} has a different tokenizer from model_name "
                    f"{ctx.config.model_name!r}; a teacher must share the student's tokenizer"
                )


def same_tokenizer(a: Any, b: Any) -> bool:
    """Same vocabulary (token -> id) where the tokenizers expose it, else the same encodings of a
    probe text."""
    if hasattr(a, "get_vocab") and hasattr(b, "get_vocab"):
        return bool(a.get_vocab() == b.get_vocab())
    probe = "The quick brown fox: 12 + 30 = 42.\n<|im_start|>assistant"
    return bool(a.encode(probe, add_special_tokens=False) == b.encode(probe, add_special_tokens=False))


class CloseBackend(Stage):
    """Release backend resources (sessions, threads). Meant for `finally_`: runs after failures too."""

    ports = ("service",)
    calls = ("ServiceBackend.close",)

    async def run(self, ctx: Context) -> None:
        await ctx.port("service").close()
