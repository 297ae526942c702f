"""The Tinker service on a kitchen backend, with no HTTP in it: sessions, training runs, samplers,
futures and checkpoints, each owned by the API key that made it.

Every training request of one model runs in `seq_id` order (`Sequencer`); every request is
identified by what the SDK identifies it by, so a resubmission is answered from the first one's
future (`FutureBook`). Backends are reached only through `kitchen.engine.ports`; checkpoints get
`tinker://<training run>/<weights|sampler_weights>/<name>` paths, recorded on disk (`RecordStore`)
so they load after a restart. `kitchen.apps.serve.app` puts this behind the wire protocol.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker import types as sdk

from kitchen.apps.serve.catalog import ModelCatalog
from kitchen.apps.serve.futures import FutureBook, Outcome, Sequencer
from kitchen.apps.serve.records import (
    TINKER_SCHEME,
    CheckpointRecord,
    CheckpointType,
    RecordStore,
    RunRecord,
    SessionRecord,
    tinker_path,
)
from kitchen.apps.serve.wire import (
    LossRequest,
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
from kitchen.engine.ports import SamplingClient, ServiceBackend, TrainingClient
from train_core.errors import InvalidInputError
from train_core.types import ForwardBackwardOutput, SampleResult

_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


class ServeError(Exception):
    """A request the server refuses, with the HTTP status to answer."""

    status = 400


class NotFound(ServeError):
    status = 404


class Gone(ServeError):
    status = 410


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
    ) -> None:
        self.backend = backend
        self.spec = spec
        self.catalog = catalog
        self.store = store
        self.full_finetune = full_finetune
        self.long_poll_s = long_poll_s
        self.book = FutureBook()
        self.models: dict[str, LiveModel] = {}
        self.samplers: dict[str, LiveSampler] = {}
        self._tokenizer_dirs: dict[str, str] = {}

    # --- sessions ---

    def create_session(self, owner: str) -> dict[str, Any]:
        session_id = f"s{secrets.token_hex(8)}"
        self.store.add_session(SessionRecord(session_id, owner, time.time()))
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
        self, request_id: str, owner: str, work: Callable[[], Awaitable[Outcome]] | None = None
    ) -> tuple[dict[str, Any], bool]:
        """The UntypedAPIFuture body for `request_id`, and whether the request is new."""
        _entry, new = self.book.start(request_id, owner)
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

    def create_model(self, owner: str, request: sdk.CreateModelRequest) -> dict[str, Any]:
        self.session(owner, request.session_id)
        backend_model = self.catalog.backend_model(request.base_model)
        model_id = f"{request.session_id}:train:{request.model_seq_id}"
        rank = self._lora_rank(request.lora_config)
        seed = (request.lora_config.seed if request.lora_config else None) or 0

        async def work() -> Outcome:
            client = await self.backend.create_training_client(backend_model, lora_rank=rank, seed=seed)
            self._register_model(owner, request.session_id, model_id, request.base_model, backend_model, rank, client)
            self._register_run_metadata(model_id, request.user_metadata)
            return Outcome(json=sdk.CreateModelResponse(model_id=model_id).model_dump(mode="json"))

        return self._future(f"{model_id}#create", owner, work)[0]

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

    def _register_run_metadata(self, model_id: str, metadata: dict[str, Any] | None) -> None:
        if metadata:
            self.store.data.runs[model_id].user_metadata = dict(metadata)
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
    ) -> dict[str, Any]:
        """Queue a training request behind every lower seq_id of its model; its result comes later."""
        live = self.model(owner, model_id)
        if seq_id is None:
            raise ServeError(f"a training request to {model_id!r} needs a seq_id")
        request_id = f"{model_id}#{seq_id}"
        body, new = self._future(request_id, owner)
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

    def check_loss(self, loss_fn: str) -> None:
        """A loss kitchen cannot compute is refused up front, in the words `kitchen validate` uses."""
        try:
            get_loss_fn(loss_fn)
        except InvalidInputError as exc:
            raise ServeError(f"{exc} (kitchen serve with backend {self.spec.name})") from None
        problems = self.spec.problems((), (loss_fn,), 1)
        if problems:
            raise ServeError(f"backend {self.spec.name!r}: " + "; ".join(problems))

    def loss(self, owner: str, request: LossRequest) -> dict[str, Any]:
        self.check_loss(request.loss_fn)
        config = numeric_config(request.loss_fn_config, request.loss_fn)
        if not request.data:
            raise ServeError("forward_backward: no data")

        async def submit(live: LiveModel) -> Awaitable[Outcome]:
            call = live.client.forward if request.forward_only else live.client.forward_backward
            pending = await call(request.data, request.loss_fn, config)

            async def result() -> Outcome:
                output: ForwardBackwardOutput = await pending
                return Outcome(proto=encode_loss_output(output))

            return result()

        return self._sequenced(owner, request.model_id, request.seq_id, submit)

    def optim_step(self, owner: str, request: sdk.OptimStepRequest) -> dict[str, Any]:
        adam = adam_params_from_sdk(request.optim_params)

        async def submit(live: LiveModel) -> Awaitable[Outcome]:
            pending = await live.client.optim_step(adam)

            async def result() -> Outcome:
                output = await pending
                return Outcome(json=sdk.OptimStepResponse(metrics=dict(output.metrics)).model_dump(mode="json"))

            return result()

        return self._sequenced(owner, request.model_id, request.seq_id, submit)

    def _checkpoint_name(self, name: str | None, seq_id: int | None) -> str:
        chosen = name if name is not None else f"{seq_id or 0:06d}"
        if not _SAFE_NAME.match(chosen) or chosen in {".", ".."}:
            raise ServeError(f"checkpoint name {chosen!r} must be 1-128 letters, digits, '.', '_' or '-'")
        return chosen

    def _backend_name(self, model_id: str, name: str) -> str:
        return f"{re.sub(r'[^A-Za-z0-9]', '-', model_id)}.{name}"

    def _save(
        self,
        owner: str,
        request: sdk.SaveWeightsRequest | sdk.SaveWeightsForSamplerRequest,
        kind: CheckpointType,
    ) -> dict[str, Any]:
        name = self._checkpoint_name(request.path, request.seq_id)
        path = tinker_path(request.model_id, kind, name)
        overwrite = getattr(request, "overwrite", False)

        async def submit(live: LiveModel) -> Awaitable[Outcome]:
            if path in self.store.data.checkpoints and not overwrite:
                raise ServeError(f"checkpoint {path} already exists")
            backend_name = self._backend_name(request.model_id, name)
            if kind == "training":
                pending = await live.client.save_state(backend_name)
            else:
                pending = await live.client.save_weights_for_sampler(backend_name)

            async def result() -> Outcome:
                backend_path = await pending
                self.store.add_checkpoint(
                    CheckpointRecord(
                        path, request.model_id, kind, name, backend_path, owner, time.time(), request.user_metadata
                    )
                )
                response = sdk.SaveWeightsResponse if kind == "training" else sdk.SaveWeightsForSamplerResponse
                return Outcome(json=response(path=path).model_dump(mode="json"))

            return result()

        return self._sequenced(owner, request.model_id, request.seq_id, submit)

    def save_weights(self, owner: str, request: sdk.SaveWeightsRequest) -> dict[str, Any]:
        return self._save(owner, request, "training")

    def save_weights_for_sampler(self, owner: str, request: sdk.SaveWeightsForSamplerRequest) -> dict[str, Any]:
        if request.path is not None:
            return self._save(owner, request, "sampler")
        if request.sampling_session_seq_id is None:
            raise ServeError("save_weights_for_sampler: give a path (a name) or a sampling_session_seq_id")
        if request.kind != "snapshot":
            raise ServeError(f"save_weights_for_sampler: kind {request.kind!r} is not served (only 'snapshot')")
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

        return self._sequenced(owner, request.model_id, request.seq_id, submit)

    def checkpoint(self, owner: str, path: str, kind: CheckpointType | None = None) -> CheckpointRecord:
        record = self.store.data.checkpoints.get(path)
        if record is None or record.owner != owner:
            if not path.startswith(TINKER_SCHEME):
                raise ServeError(f"checkpoint paths start with {TINKER_SCHEME}, got {path!r}")
            raise NotFound(f"no checkpoint at {path}")
        if kind is not None and record.checkpoint_type != kind:
            raise ServeError(f"{path} is a {record.checkpoint_type} checkpoint, not a {kind} one")
        return record

    def load_weights(self, owner: str, request: sdk.LoadWeightsRequest) -> dict[str, Any]:
        record = self.checkpoint(owner, request.path, "training")
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

        return self._sequenced(owner, request.model_id, request.seq_id, submit)

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
            self._register_run_metadata(model_id, request.user_metadata)
            return Outcome(json=sdk.LoadWeightsResponse(path=request.path, model_id=model_id).model_dump(mode="json"))

        return self._future(f"{model_id}#create", owner, work)[0]

    # --- sampling ---

    async def create_sampling_session(self, owner: str, request: sdk.CreateSamplingSessionRequest) -> dict[str, Any]:
        self.session(owner, request.session_id)
        sampler_id = f"{request.session_id}:sample:{request.sampling_session_seq_id}"
        if sampler_id not in self.samplers:
            if request.model_path is not None:
                record = self.checkpoint(owner, request.model_path)
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
        unsupported = [
            name
            for name, value in (
                ("topk_prompt_logprobs", request.topk_prompt_logprobs),
                ("topk_sample_logprobs", request.topk_sample_logprobs),
                ("target_prompt_logprobs", request.target_prompt_logprobs),
                ("prompt_alt_tokens_k", request.prompt_alt_tokens_k),
                ("record_stability_info", request.record_stability_info),
            )
            if value
        ]
        if unsupported:
            raise ServeError(f"sample: {', '.join(unsupported)} not served by kitchen serve")
        if request.sampling_session_id is None or request.seq_id is None:
            raise ServeError("sample: give a sampling_session_id and a seq_id (create a sampling client first)")
        if request.num_samples < 1:
            raise ServeError(f"sample: num_samples must be at least 1, got {request.num_samples}")
        live = self.sampler(owner, request.sampling_session_id)
        prompt = model_input_from_sdk(request.prompt, "sample prompt")
        if prompt.length == 0:
            raise ServeError("sample: the prompt is empty")
        params = sampling_params_from_sdk(request.sampling_params)
        last_n = request.prompt_logprobs_last_n
        request_id = f"{live.sampler_id}#{request.seq_id}"

        async def work() -> Outcome:
            scoring = asyncio.ensure_future(live.client.compute_logprobs(prompt)) if request.prompt_logprobs else None
            result: SampleResult = await live.client.sample(prompt, request.num_samples, params)
            prompt_lps = await scoring if scoring is not None else None
            if prompt_lps is not None and last_n is not None:
                blanked: list[float | None] = [None] * (len(prompt_lps) - last_n)
                prompt_lps = blanked + list(prompt_lps[-last_n:])
            return Outcome(proto=encode_sample_response(result, prompt_lps))

        body, _new = self._future(request_id, owner, work)
        body["sample_sequence_ids"] = [f"{request_id}/{i}" for i in range(request.num_samples)]
        return body

    # --- REST: capabilities, runs, checkpoints ---

    def capabilities(self) -> dict[str, Any]:
        models = [
            sdk.SupportedModel(model_name=name, trainable=True, sampleable=True) for name in sorted(self.catalog.models)
        ]
        return sdk.GetServerCapabilitiesResponse(supported_models=models).model_dump(mode="json", exclude_none=True)

    def _checkpoint_json(self, record: CheckpointRecord) -> dict[str, Any]:
        return sdk.Checkpoint(
            checkpoint_id=record.checkpoint_id,
            checkpoint_type=record.checkpoint_type,
            time=record.time,  # pydantic parses epoch seconds
            tinker_path=record.tinker_path,
            user_metadata=record.user_metadata,
        ).model_dump(mode="json", exclude_none=True)

    def _run_json(self, run: RunRecord) -> dict[str, Any]:
        checkpoints = self.store.checkpoints_of(run.owner, run.training_run_id)
        last = {kind: [c for c in checkpoints if c.checkpoint_type == kind] for kind in ("training", "sampler")}
        return {
            "training_run_id": run.training_run_id,
            "base_model": run.base_model,
            "model_owner": run.owner,
            "is_lora": run.lora_rank is not None,
            "lora_rank": run.lora_rank,
            "last_request_time": run.last_request_time,
            "last_checkpoint": self._checkpoint_json(last["training"][-1]) if last["training"] else None,
            "last_sampler_checkpoint": self._checkpoint_json(last["sampler"][-1]) if last["sampler"] else None,
            "user_metadata": run.user_metadata,
        }

    def run(self, owner: str, training_run_id: str) -> RunRecord:
        run = self.store.data.runs.get(training_run_id)
        if run is None or run.owner != owner:
            raise NotFound(f"unknown training run {training_run_id!r}")
        return run

    def get_training_run(self, owner: str, training_run_id: str) -> dict[str, Any]:
        return self._run_json(self.run(owner, training_run_id))

    def list_training_runs(self, owner: str, limit: int, offset: int) -> dict[str, Any]:
        runs = sorted((r for r in self.store.data.runs.values() if r.owner == owner), key=lambda r: r.created)
        page = runs[offset : offset + limit]
        return {
            "training_runs": [self._run_json(r) for r in page],
            "cursor": {"offset": offset, "limit": limit, "total_count": len(runs)},
        }

    def list_checkpoints(
        self, owner: str, training_run_id: str | None, limit: int = 1000, offset: int = 0
    ) -> dict[str, Any]:
        if training_run_id is not None:
            self.run(owner, training_run_id)
        found = self.store.checkpoints_of(owner, training_run_id)
        return {
            "checkpoints": [self._checkpoint_json(c) for c in found[offset : offset + limit]],
            "cursor": {"offset": offset, "limit": limit, "total_count": len(found)},
        }

    def delete_checkpoint(self, owner: str, training_run_id: str, checkpoint_id: str) -> None:
        path = f"{TINKER_SCHEME}{training_run_id}/{checkpoint_id}"
        record = self.checkpoint(owner, path)
        self.store.remove_checkpoint(path)
        files = Path(record.backend_path)
        if files.is_dir() and files.resolve().is_relative_to(self.store.checkpoint_dir.resolve()):
            shutil.rmtree(files, ignore_errors=True)

    def weights_info(self, owner: str, path: str) -> dict[str, Any]:
        record = self.checkpoint(owner, path)
        run = self.store.data.runs[record.training_run_id]
        return {"base_model": run.base_model, "is_lora": run.lora_rank is not None, "lora_rank": run.lora_rank}

    def get_session(self, owner: str, session_id: str) -> dict[str, Any]:
        self.session(owner, session_id, live=False)
        runs = [r.training_run_id for r in self.store.data.runs.values() if r.session_id == session_id]
        samplers = [s for s, live in self.samplers.items() if live.session_id == session_id]
        return {"training_run_ids": runs, "sampler_ids": samplers}

    def list_sessions(self, owner: str) -> dict[str, Any]:
        return {"sessions": [s.session_id for s in self.store.data.sessions.values() if s.owner == owner]}


__all__ = ["Gone", "NotFound", "ServeError", "TinkerService", "WireError"]
