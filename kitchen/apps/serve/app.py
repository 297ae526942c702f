"""The HTTP face of `kitchen serve`: a FastAPI app speaking the Tinker wire protocol.

`create_app(service, routers=...)` builds the app from routers; the Tinker API is one
(`tinker_router`), so another API on the same server (an OpenAI-compatible
`/v1/chat/completions`, say) is one more router over the same service and backend. Every route
authenticates with the `X-API-Key` header. Bad requests get a 4xx whose JSON `detail` the SDK
shows; nothing answers with a traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from tinker import types as sdk

from kitchen.apps.serve.futures import Outcome
from kitchen.apps.serve.http_basics import WireError, parse
from kitchen.apps.serve.keys import KeyCheck, Unauthorized
from kitchen.apps.serve.service import ServeError, TinkerService
from kitchen.apps.serve.wire import decode_loss_request
from train_core.errors import InvalidInputError

log = logging.getLogger("kitchen.apps.serve")

PROTOBUF = "application/x-protobuf"


class BodyLimit:
    """ASGI middleware: a request body over `max_bytes` is answered 413 before it is read whole."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"detail": f"request body larger than the server's limit of {self.max_bytes} bytes"})
        await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body.encode()})


class _TooLarge(Exception):
    pass


def _outcome_response(outcome: Outcome | None, request_id: str) -> Response:
    if outcome is None:
        return JSONResponse({"type": "try_again", "request_id": request_id, "queue_state": "active"})
    if outcome.error is not None:
        return JSONResponse({"error": outcome.error, "category": outcome.category})
    if outcome.proto is not None:
        return Response(outcome.proto, media_type=PROTOBUF)
    return JSONResponse(outcome.json)


def tinker_router(service: TinkerService, keys: KeyCheck) -> APIRouter:
    """Every endpoint the tinker SDK calls, on `service`."""

    def owner(request: Request) -> str:
        return keys.owner(request.headers.get("x-api-key"))

    router = APIRouter(prefix="/api/v1")
    Owner = Depends(owner)

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.post("/client/config")
    async def client_config(_owner: str = Owner) -> dict[str, Any]:
        # API-key auth, plain httpx, uncompressed protobuf, client-side custom losses: the SDK paths served here.
        return sdk.ClientConfigResponse(
            pjwt_auth_enabled=False,
            use_pyqwest_transport=False,
            proto_compress_fwdbwd=False,
            sample_use_retrieve_futures=False,
            custom_loss_server_side=False,
            sample_join_sampling_session=False,
        ).model_dump(mode="json")

    @router.post("/client/dynamic_config")
    async def dynamic_config(_owner: str = Owner) -> dict[str, Any]:
        return sdk.ClientDynamicConfigResponse(sample_cancel_enabled=False).model_dump(mode="json")

    @router.post("/telemetry")
    async def telemetry(_owner: str = Owner) -> dict[str, str]:
        return {"status": "accepted"}

    @router.get("/get_server_capabilities")
    async def capabilities(_owner: str = Owner) -> dict[str, Any]:
        return service.capabilities()

    @router.post("/create_session")
    async def create_session(request: Request, who: str = Owner) -> dict[str, Any]:
        parse(sdk.CreateSessionRequest, await request.body())
        return service.create_session(who)

    @router.post("/session_heartbeat")
    async def heartbeat(request: Request, who: str = Owner) -> dict[str, Any]:
        service.heartbeat(who, parse(sdk.SessionHeartbeatRequest, await request.body()).session_id)
        return {"type": "session_heartbeat"}

    @router.post("/sessions/{session_id}/finish")
    async def finish(session_id: str, request: Request, who: str = Owner) -> dict[str, Any]:
        body = _json_object(await request.body())
        reason = body.get("reason")
        status = reason.get("type") if isinstance(reason, dict) else None
        service.finish_session(who, session_id, str(status or "success"))
        return {}

    @router.get("/sessions")
    async def list_sessions(who: str = Owner) -> dict[str, Any]:
        return service.list_sessions(who)

    @router.get("/sessions/{session_id}")
    async def get_session(session_id: str, who: str = Owner) -> dict[str, Any]:
        return service.get_session(who, session_id)

    @router.post("/create_model")
    async def create_model(request: Request, who: str = Owner) -> dict[str, Any]:
        return service.create_model(who, parse(sdk.CreateModelRequest, await request.body()))

    @router.post("/get_info")
    async def get_info(request: Request, who: str = Owner) -> dict[str, Any]:
        return service.get_info(who, parse(sdk.GetInfoRequest, await request.body()).model_id)

    @router.post("/forward_backward")
    async def forward_backward(request: Request, who: str = Owner) -> dict[str, Any]:
        if request.headers.get("content-encoding"):
            raise WireError("forward_backward: compressed bodies are not accepted (the server asks for none)")
        return service.loss(who, decode_loss_request(await request.body()))

    @router.post("/optim_step")
    async def optim_step(request: Request, who: str = Owner) -> dict[str, Any]:
        return service.optim_step(who, parse(sdk.OptimStepRequest, await request.body()))

    @router.post("/save_weights")
    async def save_weights(request: Request, who: str = Owner) -> dict[str, Any]:
        return service.save_weights(who, parse(sdk.SaveWeightsRequest, await request.body()))

    @router.post("/save_weights_for_sampler")
    async def save_for_sampler(request: Request, who: str = Owner) -> dict[str, Any]:
        return service.save_weights_for_sampler(who, parse(sdk.SaveWeightsForSamplerRequest, await request.body()))

    @router.post("/load_weights")
    async def load_weights(request: Request, who: str = Owner) -> dict[str, Any]:
        return service.load_weights(who, parse(sdk.LoadWeightsRequest, await request.body()))

    @router.post("/create_sampling_session")
    async def create_sampling_session(request: Request, who: str = Owner) -> dict[str, Any]:
        return await service.create_sampling_session(who, parse(sdk.CreateSamplingSessionRequest, await request.body()))

    @router.get("/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str, who: str = Owner) -> dict[str, Any]:
        return service.get_sampler(who, sampler_id)

    @router.post("/asample")
    async def asample(request: Request, who: str = Owner) -> dict[str, Any]:
        return service.sample(who, parse(sdk.SampleRequest, await request.body()))

    @router.post("/retrieve_future")
    async def retrieve_future(request: Request, who: str = Owner) -> Response:
        request_id = parse(sdk.FutureRetrieveRequest, await request.body()).request_id
        return _outcome_response(await service.retrieve(who, request_id), request_id)

    @router.get("/training_runs")
    async def list_runs(limit: int = 20, offset: int = 0, who: str = Owner) -> dict[str, Any]:
        return service.list_training_runs(who, max(0, min(limit, 1000)), max(0, offset))

    @router.get("/training_runs/{run_id}")
    async def get_run(run_id: str, who: str = Owner) -> dict[str, Any]:
        return service.get_training_run(who, run_id)

    @router.get("/training_runs/{run_id}/checkpoints")
    async def run_checkpoints(run_id: str, who: str = Owner) -> dict[str, Any]:
        return service.list_checkpoints(who, run_id)

    @router.delete("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}")
    async def delete_checkpoint(run_id: str, checkpoint_id: str, who: str = Owner) -> Response:
        service.delete_checkpoint(who, run_id, checkpoint_id)
        return Response(status_code=204)

    @router.get("/checkpoints")
    async def checkpoints(limit: int = 100, offset: int = 0, who: str = Owner) -> dict[str, Any]:
        return service.list_checkpoints(who, None, max(0, min(limit, 1000)), max(0, offset))

    @router.post("/weights_info")
    async def weights_info(request: Request, who: str = Owner) -> dict[str, Any]:
        path = _json_object(await request.body()).get("tinker_path")
        if not isinstance(path, str):
            raise WireError("weights_info: give tinker_path")
        return service.weights_info(who, path)

    return router


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body or b"{}")
    except ValueError:
        raise WireError("the body is not JSON") from None
    except RecursionError:
        raise WireError("the body's JSON is nested too deeply") from None
    if not isinstance(value, dict):
        raise WireError("the body must be a JSON object")
    return value


def create_app(
    service: TinkerService,
    keys: KeyCheck,
    *,
    max_body_bytes: int = 256 * 1024 * 1024,
    routers: Sequence[Callable[[TinkerService, KeyCheck], APIRouter]] = (tinker_router,),
) -> FastAPI:
    """The server app: each of `routers` is built on the same service and key check."""
    app = FastAPI(title="kitchen serve", docs_url=None, redoc_url=None, openapi_url=None)
    for build in routers:
        app.include_router(build(service, keys))

    def handler(status: int) -> Callable[[Request, Exception], Awaitable[Response]]:
        async def respond(_request: Request, exc: Exception) -> Response:
            return JSONResponse({"detail": str(exc)}, status_code=getattr(exc, "status", status))

        return respond

    app.add_exception_handler(Unauthorized, handler(401))
    app.add_exception_handler(ServeError, handler(400))
    app.add_exception_handler(WireError, handler(400))
    app.add_exception_handler(InvalidInputError, handler(400))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.error("serve.unexpected_error path=%s error=%s: %s", request.url.path, type(exc).__name__, exc)
        return JSONResponse({"detail": f"internal error: {type(exc).__name__}"}, status_code=500)

    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    return app
