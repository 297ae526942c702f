"""The Tinker service on a kitchen backend, with no HTTP in it: sessions, training runs, samplers,
futures and checkpoints, each owned by the API key that made it.

Every training request of one model runs in `seq_id` order (`Sequencer`); every request is
identified by what the SDK identifies it by, so a resubmission is answered from the first one's
future (`FutureBook`). Backends are reached only through `kitchen.engine.ports`; checkpoints get
`tinker://<training run>/<weights|sampler_weights|external_weights>/<name>` paths, recorded on
disk (`RecordStore`) so they load after a restart. A checkpoint is its owner's unless published
(then any key may load and sample it), and is gone once its TTL passes. Each session's requests
are spans of its trace (`SessionTraces`). `kitchen.apps.serve.app` puts this behind the wire
protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker import types as sdk

from kitchen.apps.serve import age_encryption, hf_cache, refusals
from kitchen.apps.serve.catalog import ModelCatalog
from kitchen.apps.serve.cross_entropy_2d import expand_2d_targets
from kitchen.apps.serve.errors import Conflict, Gone, NotFound, NotServed, ServeError
from kitchen.apps.serve.futures import Entry, FutureBook, Outcome, Sequencer
from kitchen.apps.serve.records import (
    TINKER_SCHEME,
    CheckpointRecord,
    CheckpointType,
    RecordStore,
    RunRecord,
    SessionRecord,
    tinker_path,
)
from kitchen.apps.serve.refusals import refuse
from kitchen.apps.serve.traces import SessionTraces, Span
from kitchen.apps.serve.wire import (
    LossRequest,
    PromptReport,
    WireError,
    adam_params_from_sdk,
    encode_loss_output,
    encode_sample_response,
    model_input_from_sdk,
    numeric_config,
    sampling_params_from_sdk,
)
from kitchen.engine.backends import BackendSpec
from kitchen.engine.losses import get_loss_fn
from kitchen.engine.ports import SamplingClient, ScoresPromptDetail, SelectsLoraLayers, ServiceBackend, TrainingClient
from train_core.errors import InvalidInputError
from train_core.topk_targets import Expanded
from train_core.types import ForwardBackwardOutput, LoraLayers, PromptDetail, SampleResult

log = logging.getLogger("kitchen.apps.serve")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
MIN_TTL_S, MAX_TTL_S = 3600, 10 * 365 * 24 * 3600
"""The TTL range the Tinker API documents for checkpoints: one hour to ten years."""
SDK_LORA_DEFAULT = LoraLayers(attn=True, mlp=True, unembed=True)
_LAYER_KEYS = ("train_attn", "train_mlp", "train_unembed")
MAX_TOPK = 1024
"""The widest top-k, target grid or number of alternative draws a sample request may ask for (the
cost is the prompt's length times it)."""
"""What `create_lora_training_client` trains unless told otherwise (its train_* defaults)."""


@dataclass
class LiveModel:
    run: RunRecord
    client: TrainingClient
    backend_model: str
    sequencer: Sequencer = field(default_factory=Sequencer)


@dataclass
class LiveSampler:
    sampler_id: str
    owner: str
    session_id: str
    base_model: str
    model_path: str | None
    client: SamplingClient


def describe_failure(exc: BaseException) -> Outcome:
    """How a failed request is reported: the user's mistake, or the server's (no traceback either way)."""
    if isinstance(exc, InvalidInputError | ServeError):
        return Outcome(error=str(exc), category="user")
    return Outcome(error=f"{type(exc).__name__}: {exc}", category="server")


class TinkerService:
    """What the Tinker API does, on one kitchen backend."""

    def __init__(
        self,
        backend: ServiceBackend,
        spec: BackendSpec,
        catalog: ModelCatalog,
        store: RecordStore,
        *,
        full_finetune: bool = False,
        long_poll_s: float = 20.0,
        backend_settings: Any = None,
    ) -> None:
        self.backend = backend
        self.spec = spec
        self.catalog = catalog
        self.store = store
        self.full_finetune = full_finetune
        self.long_poll_s = long_poll_s
        self.backend_settings = backend_settings
        """The backend's config section (what `save_weights_external` exports with)."""
        self.traces = SessionTraces(store.folder / "traces")
        self.book = FutureBook(on_finish=self._trace)
        self.models: dict[str, LiveModel] = {}
        self.samplers: dict[str, LiveSampler] = {}
        self._tokenizer_dirs: dict[str, str] = {}
        self._eos: dict[str, list[int]] = {}

    def _trace(self, request_id: str, entry: Entry, outcome: Outcome) -> None:
        """A finished request as a span of its session's trace (request ids start with the session)."""
        track = request_id.split("#", 1)[0]
        span = Span(entry.label, track, entry.submitted, time.time(), outcome.error)
        self.traces.record(request_id.split(":", 1)[0], span)

    # --- sessions ---

    def create_session(self, owner: str, request: sdk.CreateSessionRequest) -> dict[str, Any]:
        session_id = f"s{secrets.token_hex(8)}"
        metadata = {str(k): str(v) for k, v in request.user_metadata.items()} if request.user_metadata else None
        record = SessionRecord(session_id, owner, time.time(), user_metadata=metadata)
        record.display_name = request.display_name
        if request.project_id:
            record.project_id = request.project_id
        self.store.add_session(record)
        return sdk.CreateSessionResponse(session_id=session_id).model_dump(mode="json")

    def session(self, owner: str, session_id: str, *, live: bool = True) -> SessionRecord:
        record = self.store.data.sessions.get(session_id)
        if record is None or record.owner != owner:
            raise NotFound(f"unknown session {session_id!r}")
        if live and record.finished is not None:
            raise Gone(f"session {session_id!r} has finished ({record.finished})")
        return record

    def heartbeat(self, owner: str, session_id: str) -> None:
        self.session(owner, session_id)

    def finish_session(self, owner: str, session_id: str, reason: str) -> None:
        """Mark the session finished (first reason wins) and release its live clients."""
        record = self.session(owner, session_id, live=False)
        if record.finished is None:
            record.finished = reason
            self.store.save()
        for model_id in [m for m, live in self.models.items() if live.run.session_id == session_id]:
            del self.models[model_id]
        for sampler_id in [s for s, live in self.samplers.items() if live.session_id == session_id]:
            del self.samplers[sampler_id]

    # --- futures ---

    def _future(
        self, request_id: str, owner: str, work: Callable[[], Awaitable[Outcome]] | None = None, label: str = "request"
    ) -> tuple[dict[str, Any], bool]:
        """The UntypedAPIFuture body for `request_id`, and whether the request is new."""
        _entry, new = self.book.start(request_id, owner, label)
        if new and work is not None:
            self.book.run(request_id, work, describe_failure)
        return {"request_id": request_id}, new

    async def retrieve(self, owner: str, request_id: str) -> Outcome | None:
        entry = self.book.get(request_id, owner)
        if entry is None:
            raise NotFound(f"unknown request {request_id!r} (finished too long ago, or the server restarted)")
        return await self.book.wait(entry, self.long_poll_s)

    # --- training runs ---

    def model(self, owner: str, model_id: str) -> LiveModel:
        live = self.models.get(model_id)
        if live is None or live.run.owner != owner:
            run = self.store.data.runs.get(model_id)
            if run is not None and run.owner == owner and run.copy_of is not None:
                raise ServeError(
                    f"training run {model_id!r} holds a copy of {run.copy_of} and cannot be trained "
                    "(create a training client from its checkpoint to train on)"
                )
            if run is not None and run.owner == owner:
                last = [
                    c.tinker_path for c in self.store.checkpoints_of(owner, model_id) if c.checkpoint_type == "training"
                ]
                hint = f"; its last saved state is {last[-1]}" if last else ""
                raise Gone(
                    f"training run {model_id!r} is no longer live (its session ended or the server restarted){hint}"
                )
            raise NotFound(f"unknown model {model_id!r}")
        live.run.last_request_time = time.time()
        return live

    def _lora_rank(self, lora_config: sdk.LoraConfig | None) -> int | None:
        return None if self.full_finetune or lora_config is None else lora_config.rank

    def check_optimizer(self, config: object) -> None:
        """The optimizer a training run is created with: AdamW is served, Dimuon refused by name."""
        kind = getattr(config, "type", "adamw")
        if kind == "dimuon":
            raise refuse(refusals.DIMUON)
        if kind != "adamw":
            raise ServeError(f"optimizer {kind!r} is not one the Tinker API defines; kitchen serve runs 'adamw'")

    def _layers(self, lora_config: sdk.LoraConfig | None) -> LoraLayers | None:
        """The LoRA layer choice of a creation request; a choice the backend cannot make is refused."""
        if lora_config is None or self.full_finetune:
            return None
        layers = LoraLayers(lora_config.train_attn, lora_config.train_mlp, lora_config.train_unembed)
        if not (layers.attn or layers.mlp or layers.unembed):
            raise ServeError("create_model: at least one of train_attn, train_mlp and train_unembed must be true")
        if not isinstance(self.backend, SelectsLoraLayers) and layers != SDK_LORA_DEFAULT:
            raise refuse(
                f"LoRA layer selection (train_attn={layers.attn}, train_mlp={layers.mlp}, "
                f"train_unembed={layers.unembed}) is not served by backend {self.spec.name!r}, which puts "
                "adapters on its own choice of layers; serve with --backend local or leave the train_* defaults"
            )
        return layers

    async def _new_training_client(
        self, backend_model: str, rank: int | None, seed: int, layers: LoraLayers | None
    ) -> TrainingClient:
        if rank is not None and layers is not None and isinstance(self.backend, SelectsLoraLayers):
            return await self.backend.create_lora_training_client(backend_model, rank, seed, layers)
        return await self.backend.create_training_client(backend_model, lora_rank=rank, seed=seed)

    def create_model(self, owner: str, request: sdk.CreateModelRequest) -> dict[str, Any]:
        self.session(owner, request.session_id)
        self.check_optimizer(request.optimizer_config)
        backend_model = self.catalog.backend_model(request.base_model)
        model_id = f"{request.session_id}:train:{request.model_seq_id}"
        rank = self._lora_rank(request.lora_config)
        layers = self._layers(request.lora_config)
        seed = (request.lora_config.seed if request.lora_config else None) or 0

        async def work() -> Outcome:
            client = await self._new_training_client(backend_model, rank, seed, layers)
            self._register_model(owner, request.session_id, model_id, request.base_model, backend_model, rank, client)
            self._register_run_metadata(model_id, request.user_metadata, layers)
            return Outcome(json=sdk.CreateModelResponse(model_id=model_id).model_dump(mode="json"))

        return self._future(f"{model_id}#create", owner, work, "create_model")[0]

    def _register_model(
        self,
        owner: str,
        session_id: str,
        model_id: str,
        base_model: str,
        backend_model: str,
        rank: int | None,
        client: TrainingClient,
    ) -> None:
        now = time.time()
        run = RunRecord(model_id, owner, session_id, base_model, rank, now, now)
        self.store.add_run(run)
        self.models[model_id] = LiveModel(run, client, backend_model)

    def _register_run_metadata(
        self, model_id: str, metadata: dict[str, Any] | None, layers: LoraLayers | None = None
    ) -> None:
        run = self.store.data.runs[model_id]
        if metadata:
            run.user_metadata = dict(metadata)
        if layers is not None:
            run.layers = dict(zip(_LAYER_KEYS, (layers.attn, layers.mlp, layers.unembed), strict=True))
        if metadata or layers is not None:
            self.store.save()

    def tokenizer_id(self, base_model: str) -> str:
        """A local folder holding the backend's tokenizer for `base_model`, which loads offline."""
        if base_model not in self._tokenizer_dirs:
            backend_model = self.catalog.backend_model(base_model)
            folder = self.store.tokenizer_dir / re.sub(r"[^A-Za-z0-9._-]", "_", base_model)
            if not (folder / "tokenizer_config.json").exists():
                tokenizer: Any = self.backend.get_tokenizer(backend_model)
                tokenizer.save_pretrained(str(folder))
            self._tokenizer_dirs[base_model] = str(folder.resolve())
        return self._tokenizer_dirs[base_model]

    def cache_tokenizers(self) -> list[str]:
        """Put each served name's tokenizer in this machine's HF cache (`kitchen.apps.serve.hf_cache`);
        the names written."""
        from huggingface_hub import constants

        written = []
        for name in sorted(self.catalog.models):
            try:
                folder = Path(self.tokenizer_id(name))
                tokenizer: Any = self.backend.get_tokenizer(self.catalog.backend_model(name))
                source = Path(str(getattr(tokenizer, "name_or_path", "")))
                if hf_cache.publish(Path(constants.HF_HUB_CACHE), name, folder, source if source.is_dir() else None):
                    written.append(name)
            except (OSError, InvalidInputError) as exc:
                log.warning("serve.hf_cache_skipped name=%s error=%s", name, exc)
        return written

    def eos_ids(self, base_model: str) -> list[int]:
        """The served model's end-of-sequence ids: where sampling stops when a request names no stop."""
        if base_model not in self._eos:
            tokenizer: Any = self.backend.get_tokenizer(self.catalog.backend_model(base_model))
            eos = getattr(tokenizer, "eos_token_id", None)
            self._eos[base_model] = [] if eos is None else [int(t) for t in (eos if isinstance(eos, list) else [eos])]
        return self._eos[base_model]

    def get_info(self, owner: str, model_id: str) -> dict[str, Any]:
        live = self.model(owner, model_id)
        run = live.run
        info = sdk.GetInfoResponse(
            model_id=model_id,
            model_data=sdk.ModelData(
                arch=None, model_name=run.base_model, tokenizer_id=self.tokenizer_id(run.base_model)
            ),
            is_lora=run.lora_rank is not None,
            lora_rank=run.lora_rank,
            model_name=run.base_model,
        )
        return info.model_dump(mode="json", exclude_none=True)

    def _sequenced(
        self,
        owner: str,
        model_id: str,
        seq_id: int | None,
        submit: Callable[[LiveModel], Awaitable[Awaitable[Outcome]]],
        label: str,
    ) -> dict[str, Any]:
        """Queue a training request behind every lower seq_id of its model; its result comes later."""
        live = self.model(owner, model_id)
        if seq_id is None:
            raise ServeError(f"a training request to {model_id!r} needs a seq_id")
        request_id = f"{model_id}#{seq_id}"
        body, new = self._future(request_id, owner, label=label)
        if not new:
            return body
        if live.sequencer.seen(seq_id):
            self.book.finish(
                request_id, Outcome(error=f"seq_id {seq_id} of {model_id!r} was already used", category="user")
            )
            return body

        async def step() -> None:
            try:
                result = await submit(live)
            except Exception as exc:
                self.book.finish(request_id, describe_failure(exc))
                return
            self.book.run(request_id, lambda: result, describe_failure)

        asyncio.get_running_loop().create_task(live.sequencer.add(seq_id, step))
        return body

    # --- the training requests of a model, in seq_id order ---

    @contextlib.contextmanager
    def _turn(self, owner: str, model_id: str | None, seq_id: int | None) -> Iterator[None]:
        """A sequenced request refused before it is queued still takes its turn: its seq_id is
        passed over, so the model's later requests (which the SDK sends regardless) do not wait
        for it forever."""
        try:
            yield
        except (ServeError, WireError, InvalidInputError):
            live = self.models.get(model_id or "")
            if live is not None and live.run.owner == owner and seq_id is not None and not live.sequencer.seen(seq_id):
                asyncio.get_running_loop().create_task(live.sequencer.add(seq_id, _nothing))
            raise

    def loss(self, owner: str, request: LossRequest) -> dict[str, Any]:
        with self._turn(owner, request.model_id, request.seq_id):
            return self._loss(owner, request)

    def optim_step(self, owner: str, request: sdk.OptimStepRequest) -> dict[str, Any]:
        with self._turn(owner, request.model_id, request.seq_id):
            return self._optim_step(owner, request)

    def save_weights(self, owner: str, request: sdk.SaveWeightsRequest) -> dict[str, Any]:
        with self._turn(owner, request.model_id, request.seq_id):
            return self._save_weights(owner, request)

    def save_weights_external(self, owner: str, request: sdk.SaveWeightsExternalRequest) -> dict[str, Any]:
        with self._turn(owner, request.model_id, request.seq_id):
            return self._save_weights_external(owner, request)

    def save_weights_for_sampler(self, owner: str, request: sdk.SaveWeightsForSamplerRequest) -> dict[str, Any]:
        with self._turn(owner, request.model_id, request.seq_id):
            return self._save_weights_for_sampler(owner, request)

    def load_weights(
        self, owner: str, request: sdk.LoadWeightsRequest, token_owner: str | None = None
    ) -> dict[str, Any]:
        with self._turn(owner, request.model_id if request.session_id is None else None, request.seq_id):
            return self._load_weights(owner, request, token_owner)

    def check_loss(self, loss_fn: str) -> None:
        """A loss kitchen cannot compute is refused up front, in the words `kitchen validate` uses."""
        try:
            get_loss_fn(loss_fn)
        except InvalidInputError as exc:
            if loss_fn == "stable_reinforce":
                raise refuse(f"{refusals.STABLE_REINFORCE} ({exc})") from None
            if loss_fn == "custom":
                raise refuse(refusals.CUSTOM_LOSS_UPLOAD) from None
            raise ServeError(f"{exc} (kitchen serve with backend {self.spec.name})") from None
        problems = self.spec.problems((), (loss_fn,), 1)
        if problems:
            raise ServeError(f"backend {self.spec.name!r}: " + "; ".join(problems))

    def _loss(self, owner: str, request: LossRequest) -> dict[str, Any]:
        self.check_loss(request.loss_fn)
        config = numeric_config(request.loss_fn_config, request.loss_fn)
        if not request.data:
            raise ServeError("forward_backward: no data")
        expanded: Expanded | None = expand_2d_targets(request.data, request.loss_fn)
        data = request.data if expanded is None else expanded.data

        async def submit(live: LiveModel) -> Awaitable[Outcome]:
            call = live.client.forward if request.forward_only else live.client.forward_backward
            pending = await call(data, request.loss_fn, config)

            async def result() -> Outcome:
                output: ForwardBackwardOutput = await pending
                if expanded is not None:
                    output = expanded.regroup(output)
                return Outcome(proto=encode_loss_output(output))

            return result()

        label = "forward" if request.forward_only else "forward_backward"
        return self._sequenced(owner, request.model_id, request.seq_id, submit, label)

    def _optim_step(self, owner: str, request: sdk.OptimStepRequest) -> dict[str, Any]:
        if getattr(request.optim_params, "type", None) == "dimuon":
            raise refuse(refusals.DIMUON)
        adam = adam_params_from_sdk(request.optim_params)

        async def submit(live: LiveModel) -> Awaitable[Outcome]:
            pending = await live.client.optim_step(adam)

            async def result() -> Outcome:
                output = await pending
                return Outcome(json=sdk.OptimStepResponse(metrics=dict(output.metrics)).model_dump(mode="json"))

            return result()

        return self._sequenced(owner, request.model_id, request.seq_id, submit, "optim_step")

    def _checkpoint_name(self, name: str | None, seq_id: int | None) -> str:
        chosen = name if name is not None else f"{seq_id or 0:06d}"
        if not _SAFE_NAME.match(chosen) or chosen in {".", ".."}:
            raise ServeError(f"checkpoint name {chosen!r} must be 1-128 letters, digits, '.', '_' or '-'")
        return chosen

    def _backend_name(self, model_id: str, name: str) -> str:
        return f"{re.sub(r'[^A-Za-z0-9]', '-', model_id)}.{name}"

    @staticmethod
    def expiry(ttl_seconds: int | None) -> float | None:
        """When a checkpoint saved now with `ttl_seconds` expires; the range the API documents."""
        if ttl_seconds is None:
            return None
        if not MIN_TTL_S <= ttl_seconds <= MAX_TTL_S:
            raise ServeError(
                f"ttl_seconds must be between {MIN_TTL_S} (1 hour) and {MAX_TTL_S} (10 years), got {ttl_seconds}"
            )
        return time.time() + ttl_seconds

    def _save(
        self,
        owner: str,
        request: sdk.SaveWeightsRequest | sdk.SaveWeightsForSamplerRequest | sdk.SaveWeightsExternalRequest,
        kind: CheckpointType,
    ) -> dict[str, Any]:
        name = self._checkpoint_name(request.path, request.seq_id)
        path = tinker_path(request.model_id, kind, name)
        overwrite = getattr(request, "overwrite", False)
        metadata = getattr(request, "user_metadata", None)
        expires_at = self.expiry(request.ttl_seconds)
        recipients = age_encryption.recipients(getattr(request, "age_encryption_recipients", None) or [])
        self._check_free(path, overwrite)  # now, and again in turn (an earlier save may have taken it)

        async def submit(live: LiveModel) -> Awaitable[Outcome]:
            self._check_free(path, overwrite)
            backend_name = self._backend_name(request.model_id, name)
            if kind == "training":
                pending = await live.client.save_state(backend_name)
            else:
                pending = await live.client.save_weights_for_sampler(backend_name)

            async def result() -> Outcome:
                backend_path = await pending
                if kind == "external":
                    saved = backend_path
                    backend_path = await self._export(saved, request.model_id, name, recipients)
                    self._remove_files(saved)  # the export is what is kept
                record = CheckpointRecord(
                    path, request.model_id, kind, name, backend_path, owner, time.time(), metadata, False, expires_at
                )
                self.store.add_checkpoint(record)
                self.store.log_event("checkpoint_create", owner, path)
                response = {
                    "training": sdk.SaveWeightsResponse,
                    "sampler": sdk.SaveWeightsForSamplerResponse,
                    "external": sdk.SaveWeightsExternalResponse,
                }[kind]
                return Outcome(json=response(path=path).model_dump(mode="json"))

            return result()

        return self._sequenced(owner, request.model_id, request.seq_id, submit, f"save_{kind}")

    def _check_free(self, path: str, overwrite: bool) -> None:
        self.sweep_expired()
        if path in self.store.data.checkpoints and not overwrite:
            raise Conflict(f"checkpoint {path} already exists (save with overwrite=True to replace it)")

    async def _export(self, saved: str, model_id: str, name: str, recipients: list[Any]) -> str:
        """Write the weights saved at `saved` (a backend path) in Hugging Face form (a PEFT adapter
        for LoRA, a model directory for full fine-tuning) under the store, each file encrypted to
        `recipients` when there are any; that folder's path."""
        export = self.spec.export_hf
        if export is None:
            raise self._no_export()
        out_dir = self.store.folder / "external" / self._backend_name(model_id, name)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        await asyncio.to_thread(export, saved, out_dir, False, self.backend_settings)
        if recipients:
            await asyncio.to_thread(age_encryption.encrypt_folder, out_dir, recipients)
        return str(out_dir.resolve())

    def _save_weights(self, owner: str, request: sdk.SaveWeightsRequest) -> dict[str, Any]:
        return self._save(owner, request, "training")

    def _save_weights_external(self, owner: str, request: sdk.SaveWeightsExternalRequest) -> dict[str, Any]:
        if self.spec.export_hf is None:
            raise self._no_export()
        return self._save(owner, request, "external")

    def _no_export(self) -> NotServed:
        why = self.spec.export_hint or "it cannot export weights"
        return refuse(f"save_weights_external is not served by backend {self.spec.name!r}: {why}")

    def _save_weights_for_sampler(self, owner: str, request: sdk.SaveWeightsForSamplerRequest) -> dict[str, Any]:
        if request.path is not None:
            return self._save(owner, request, "sampler")
        if request.sampling_session_seq_id is None:
            raise ServeError("save_weights_for_sampler: give a path (a name) or a sampling_session_seq_id")
        if request.kind == "inflight":
            raise refuse(refusals.INFLIGHT_SAMPLER)
        if request.kind != "snapshot":
            raise ServeError(
                f"save_weights_for_sampler: unknown kind {request.kind!r} (the API has 'snapshot', 'inflight')"
            )
        seq = request.sampling_session_seq_id

        async def submit(live: LiveModel) -> Awaitable[Outcome]:
            sampler_id = f"{live.run.session_id}:sample:{seq}"
            client = await live.client.save_weights_and_get_sampling_client()
            self.samplers[sampler_id] = LiveSampler(
                sampler_id, owner, live.run.session_id, live.run.base_model, None, client
            )

            async def result() -> Outcome:
                body = sdk.SaveWeightsForSamplerResponseInternal(sampling_session_id=sampler_id)
                return Outcome(json=body.model_dump(mode="json", exclude_none=True))

            return result()

        return self._sequenced(owner, request.model_id, request.seq_id, submit, "save_weights_and_get_sampler")

    def sweep_expired(self) -> None:
        """Delete every checkpoint whose TTL has passed (records and, unless a copy shares them, files)."""
        now = time.time()
        for record in [
            c for c in self.store.data.checkpoints.values() if c.expires_at is not None and c.expires_at <= now
        ]:
            self._drop_checkpoint(record)

    def _drop_checkpoint(self, record: CheckpointRecord) -> None:
        self.store.remove_checkpoint(record.tinker_path)
        self._remove_files(record.backend_path)

    def _remove_files(self, backend_path: str) -> None:
        """Delete a checkpoint's files, unless a record (a copy) still uses them; only in the store."""
        if self.store.sharing(backend_path):
            return
        files = Path(backend_path)
        if files.is_dir() and files.resolve().is_relative_to(self.store.folder.resolve()):
            shutil.rmtree(files, ignore_errors=True)

    def checkpoint(
        self,
        owner: str,
        path: str,
        kind: CheckpointType | None = None,
        *,
        read: bool = False,
        token_owner: str | None = None,
    ) -> CheckpointRecord:
        """The checkpoint at `path` if `owner` may use it: its own, or with `read` a published one or
        one owned by `token_owner` (a weights access token's owner). Expired ones are gone (404)."""
        if not path.startswith(TINKER_SCHEME):
            raise ServeError(f"checkpoint paths start with {TINKER_SCHEME}, got {path!r}")
        self.sweep_expired()
        record = self.store.data.checkpoints.get(path)
        allowed = record is not None and (
            record.owner == owner or (read and (record.public or record.owner == token_owner))
        )
        if record is None or not allowed:
            raise NotFound(f"no checkpoint at {path} (never saved, deleted, expired, or not visible to this key)")
        if kind is not None and record.checkpoint_type != kind:
            raise ServeError(f"{path} is a {record.checkpoint_type} checkpoint, not a {kind} one")
        return record

    def _load_weights(
        self, owner: str, request: sdk.LoadWeightsRequest, token_owner: str | None = None
    ) -> dict[str, Any]:
        record = self.checkpoint(owner, request.path, "training", read=True, token_owner=token_owner)
        if request.optimizer_config is not None:
            self.check_optimizer(request.optimizer_config)
        if request.session_id is not None:
            return self._create_from_state(owner, request, record)
        if request.model_id is None:
            raise ServeError("load_weights: give a model_id and seq_id, or a session_id and model_seq_id")

        async def submit(live: LiveModel) -> Awaitable[Outcome]:
            pending = await live.client.load_state(record.backend_path, with_optimizer=request.optimizer)

            async def result() -> Outcome:
                await pending
                return Outcome(json=sdk.LoadWeightsResponse(path=request.path).model_dump(mode="json"))

            return result()

        return self._sequenced(owner, request.model_id, request.seq_id, submit, "load_weights")

    def _create_from_state(
        self, owner: str, request: sdk.LoadWeightsRequest, record: CheckpointRecord
    ) -> dict[str, Any]:
        """`create_training_client_from_state[_with_optimizer]`: one LoadWeights makes a new model."""
        session_id = request.session_id
        assert session_id is not None
        self.session(owner, session_id)
        source = self.store.data.runs[record.training_run_id]
        base_model = request.base_model or source.base_model
        backend_model = self.catalog.backend_model(base_model)
        model_id = f"{session_id}:train:{request.model_seq_id}"

        async def work() -> Outcome:
            client = await self.backend.create_training_client_from_state(record.backend_path, request.optimizer)
            self._register_model(owner, session_id, model_id, base_model, backend_model, source.lora_rank, client)
            layers = None if source.layers is None else LoraLayers(*(source.layers[k] for k in _LAYER_KEYS))
            self._register_run_metadata(model_id, request.user_metadata, layers)
            return Outcome(json=sdk.LoadWeightsResponse(path=request.path, model_id=model_id).model_dump(mode="json"))

        return self._future(f"{model_id}#create", owner, work, "create_model_from_state")[0]

    # --- sampling ---

    async def create_sampling_session(self, owner: str, request: sdk.CreateSamplingSessionRequest) -> dict[str, Any]:
        self.session(owner, request.session_id)
        sampler_id = f"{request.session_id}:sample:{request.sampling_session_seq_id}"
        if sampler_id not in self.samplers:
            if request.model_path is not None:
                record = self.checkpoint(owner, request.model_path, read=True)
                if record.checkpoint_type == "external":
                    raise ServeError(
                        f"{request.model_path} holds exported (external) weights, which are for download; "
                        "sample from a sampler or training checkpoint"
                    )
                base_model = self.store.data.runs[record.training_run_id].base_model
                client = await self.backend.create_sampling_client(model_path=record.backend_path)
            elif request.base_model is not None:
                base_model = request.base_model
                client = await self.backend.create_sampling_client(base_model=self.catalog.backend_model(base_model))
            else:
                raise ServeError("create_sampling_session: give a model_path or a base_model")
            self.samplers[sampler_id] = LiveSampler(
                sampler_id, owner, request.session_id, base_model, request.model_path, client
            )
        return sdk.CreateSamplingSessionResponse(sampling_session_id=sampler_id).model_dump(mode="json")

    def sampler(self, owner: str, sampler_id: str) -> LiveSampler:
        live = self.samplers.get(sampler_id)
        if live is None or live.owner != owner:
            raise NotFound(f"unknown sampler {sampler_id!r}")
        return live

    def get_sampler(self, owner: str, sampler_id: str) -> dict[str, Any]:
        live = self.sampler(owner, sampler_id)
        return {"sampler_id": sampler_id, "base_model": live.base_model, "model_path": live.model_path}

    def sample(self, owner: str, request: sdk.SampleRequest) -> dict[str, Any]:
        if request.record_stability_info:
            raise refuse(refusals.STABILITY_INFO)
        if request.sampling_session_id is None or request.seq_id is None:
            raise ServeError("sample: give a sampling_session_id and a seq_id (create a sampling client first)")
        if request.num_samples < 1:
            raise ServeError(f"sample: num_samples must be at least 1, got {request.num_samples}")
        live = self.sampler(owner, request.sampling_session_id)
        prompt = model_input_from_sdk(request.prompt, "sample prompt")
        if prompt.length == 0:
            raise ServeError("sample: the prompt is empty")
        topk_sampled = _width("topk_sample_logprobs", request.topk_sample_logprobs)
        params = sampling_params_from_sdk(request.sampling_params, self.eos_ids(live.base_model), topk_sampled)
        last_n = request.prompt_logprobs_last_n
        if last_n is not None and not 1 <= last_n <= prompt.length - 1:
            raise ServeError(
                f"sample: prompt_logprobs_last_n must be between 1 and len(prompt) - 1 = {prompt.length - 1}, "
                f"got {last_n}"
            )
        detail = self._prompt_detail(request, prompt.length, live)
        request_id = f"{live.sampler_id}#{request.seq_id}"

        async def work() -> Outcome:
            report = await self._score_prompt(live, prompt, request, detail)
            result: SampleResult = await live.client.sample(prompt, request.num_samples, params)
            return Outcome(proto=encode_sample_response(result, report, topk_sampled))

        body, _new = self._future(request_id, owner, work, "sample")
        body["sample_sequence_ids"] = [f"{request_id}/{i}" for i in range(request.num_samples)]
        return body

    def _prompt_detail(self, request: sdk.SampleRequest, length: int, live: LiveSampler) -> PromptDetail | None:
        """What a sample request asks about its prompt beyond its logprobs, checked; None: nothing."""
        topk = _width("topk_prompt_logprobs", request.topk_prompt_logprobs)
        alt_k = _width("prompt_alt_tokens_k", request.prompt_alt_tokens_k)
        targets = (
            None if request.target_prompt_logprobs is None else target_grid(request.target_prompt_logprobs, length)
        )
        if not (topk or alt_k or targets is not None):
            return None
        if not isinstance(live.client, ScoresPromptDetail):
            asked = [
                n
                for n, v in (
                    ("topk_prompt_logprobs", topk),
                    ("prompt_alt_tokens_k", alt_k),
                    ("target_prompt_logprobs", targets),
                )
                if v
            ]
            raise refuse(
                f"{', '.join(asked)}: not served by backend {self.spec.name!r}, whose sampler reports only the "
                "prompt tokens' own logprobs; serve with --backend local or noop, or use include_prompt_logprobs"
            )
        seed = request.sampling_params.seed
        return PromptDetail(
            topk=topk,
            targets=targets,
            alt_k=alt_k,
            temperature=float(request.sampling_params.temperature),
            seed=seed if seed is not None else secrets.randbits(63),
        )

    async def _score_prompt(
        self, live: LiveSampler, prompt: Any, request: sdk.SampleRequest, detail: PromptDetail | None
    ) -> PromptReport:
        last_n = request.prompt_logprobs_last_n
        if detail is None:
            if not request.prompt_logprobs:
                return PromptReport()
            logprobs = await live.client.compute_logprobs(prompt)
            return PromptReport(logprobs=_last(logprobs, last_n))
        assert isinstance(live.client, ScoresPromptDetail)
        scores = await live.client.score_prompt(prompt, detail)
        if last_n is not None and scores.topk is not None:
            cut = len(scores.topk) - last_n
            scores = dataclasses.replace(scores, topk=[[] for _ in range(cut)] + scores.topk[cut:])
        width = len(detail.targets[0]) if detail.targets else 0
        asked = _last(scores.logprobs, last_n) if request.prompt_logprobs else None
        return PromptReport(asked, scores, detail.topk, width, detail.alt_k)


async def _nothing() -> None:
    """The step of a seq_id whose request was refused."""


def _width(name: str, value: int) -> int:
    """A top-k width or draw count of a sample request, in the range the server bounds it to."""
    if not 0 <= value <= MAX_TOPK:
        raise ServeError(f"sample: {name} must be between 0 and {MAX_TOPK}, got {value}")
    return value


def _last(logprobs: list[float | None], last_n: int | None) -> list[float | None]:
    """`prompt_logprobs_last_n`: only the last N scored, the others None."""
    if last_n is None:
        return logprobs
    return [None] * (len(logprobs) - last_n) + list(logprobs[-last_n:])


def target_grid(tensor: Any, length: int) -> list[list[int]]:
    """`target_prompt_logprobs` (dense or sparse CSR int64, [len(prompt) - 1, K]) as rows of ids,
    -1 where nothing is asked (a sparse tensor's missing cells)."""
    shape = list(tensor.shape or [])
    if tensor.dtype != "int64" or len(shape) != 2:
        raise ServeError(f"target_prompt_logprobs must be a 2-D int64 tensor, got {tensor.dtype} of shape {shape}")
    rows, width = shape
    if rows != length - 1:
        raise ServeError(f"target_prompt_logprobs must have len(prompt) - 1 = {length - 1} rows, got {rows}")
    if not 1 <= width <= MAX_TOPK:
        raise ServeError(f"target_prompt_logprobs must ask 1 to {MAX_TOPK} ids a row, got {width}")
    values = [int(v) for v in tensor.data]
    if tensor.sparse_crow_indices is None:
        if len(values) != rows * width:
            raise ServeError(f"target_prompt_logprobs holds {len(values)} ids, not {rows} x {width}")
        return [values[i * width : (i + 1) * width] for i in range(rows)]
    crow, col = list(tensor.sparse_crow_indices), list(tensor.sparse_col_indices or [])
    if len(crow) != rows + 1 or len(col) != len(values) or any(not 0 <= c < width for c in col):
        raise ServeError("target_prompt_logprobs: malformed sparse CSR tensor")
    grid = [[-1] * width for _ in range(rows)]
    for row in range(rows):
        for index in range(crow[row], crow[row + 1]):
            grid[row][col[index]] = values[index]
    return grid


__all__ = ["Gone", "NotFound", "NotServed", "ServeError", "TinkerService", "WireError"]
