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
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from tinker import types as sdk

from kitchen.apps.serve import refusals
from kitchen.apps.serve.errors import NotFound, ServeError
from kitchen.apps.serve.futures import Outcome
from kitchen.apps.serve.http_basics import WireError, parse
from kitchen.apps.serve.keys import ORGANIZATION, KeyCheck, Unauthorized
from kitchen.apps.serve.refusals import refuse
from kitchen.apps.serve.rest import TinkerRest
from kitchen.apps.serve.service import TinkerService
from kitchen.apps.serve.wire import decode_loss_request
from train_core.errors import InvalidInputError

log = logging.getLogger("kitchen.apps.serve")

PROTOBUF = "application/x-protobuf"
SDK_RANGE = ">=0.38,<0.39"
"""The tinker SDK versions this server is tested against (`tests/serve/test_sdk_conformance.py`)."""


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
    """Every endpoint the tinker SDK calls, on `service`; any other `/api/v1` path is a 404 naming it."""
    rest = TinkerRest(service, keys.secret)

    def owner(request: Request) -> str:
        return keys.owner(request.headers.get("x-api-key"))

    def token_owner(token: str | None) -> str | None:
        """The owner of a weights access token (another key, or a token this server issued)."""
        if token is None:
            return None
        try:
            return keys.owner(token)
        except Unauthorized:
            raise ServeError("weights_access_token is not a valid API key or token of this server") from None

    def base_url(request: Request) -> str:
        return str(request.base_url)

    router = APIRouter(prefix="/api/v1")
    Owner = Depends(owner)

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.post("/auth/token")
    async def auth_token(request: Request) -> dict[str, str]:
        return {"jwt": keys.token(request.headers.get("x-api-key"))}

    @router.get("/auth/apikey/me")
    async def api_key_me(request: Request, who: str = Owner) -> dict[str, Any]:
        # `tinker auth login` checks a pasted key here; a local server knows no user or email
        return {
            "key_id": int(who[:12], 16),
            "name": "kitchen serve key",
            "note": "",
            "details": {"org_details": {"name": ORGANIZATION}, "user_details": {"email": ""}},
        }

    @router.delete("/auth/apikey/me")
    async def delete_api_key(_owner: str = Owner) -> dict[str, Any]:
        raise refuse(refusals.KEY_DELETION)

    @router.post("/client/config")
    async def client_config(_owner: str = Owner) -> dict[str, Any]:
        # JWT exchange (whoami reads it), plain httpx, uncompressed protobuf, client-side custom
        # losses, per-request futures: the SDK paths served here.
        return sdk.ClientConfigResponse(
            pjwt_auth_enabled=True,
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
        return rest.capabilities()

    # --- sessions ---

    @router.post("/create_session")
    async def create_session(request: Request, who: str = Owner) -> dict[str, Any]:
        return service.create_session(who, parse(sdk.CreateSessionRequest, await request.body()))

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
    async def list_sessions(limit: int = 20, offset: int = 0, who: str = Owner) -> dict[str, Any]:
        return rest.list_sessions(who, max(0, limit), max(0, offset))

    @router.post("/sessions/search")
    async def search_sessions(request: Request, who: str = Owner) -> dict[str, Any]:
        return rest.search_sessions(who, parse(sdk.SessionSearchRequest, await request.body()))

    @router.get("/sessions/{session_id}")
    async def get_session(session_id: str, who: str = Owner) -> dict[str, Any]:
        return rest.get_session(who, session_id)

    @router.put("/sessions/{session_id}/project")
    async def assign_project(session_id: str, request: Request, who: str = Owner) -> Response:
        project = _json_object(await request.body()).get("project_id")
        rest.assign_project(who, session_id, project if isinstance(project, str) else None)
        return Response(status_code=204)

    @router.get("/sessions/{session_id}/trace_export")
    async def trace_export(session_id: str, request: Request, who: str = Owner) -> dict[str, Any]:
        return rest.export_trace(who, session_id, base_url(request))

    # --- training ---

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

    @router.post("/create_custom_loss")
    async def create_custom_loss(_owner: str = Owner) -> dict[str, Any]:
        raise refuse(refusals.CUSTOM_LOSS_UPLOAD)

    # --- weights ---

    @router.post("/save_weights")
    async def save_weights(request: Request, who: str = Owner) -> dict[str, Any]:
        return service.save_weights(who, parse(sdk.SaveWeightsRequest, await request.body()))

    @router.post("/save_weights_for_sampler")
    async def save_for_sampler(request: Request, who: str = Owner) -> dict[str, Any]:
        return service.save_weights_for_sampler(who, parse(sdk.SaveWeightsForSamplerRequest, await request.body()))

    @router.post("/save_weights_external")
    async def save_external(request: Request, who: str = Owner) -> dict[str, Any]:
        return service.save_weights_external(who, parse(sdk.SaveWeightsExternalRequest, await request.body()))

    @router.post("/load_weights")
    async def load_weights(request: Request, who: str = Owner) -> dict[str, Any]:
        body = parse(sdk.LoadWeightsRequest, await request.body())
        return service.load_weights(who, body, token_owner(body.weights_access_token))

    @router.post("/copy_weights")
    async def copy_weights(request: Request, who: str = Owner) -> dict[str, Any]:
        body = parse(sdk.CopyWeightsRequest, await request.body())
        token = body.weights_access_token or request.headers.get("x-tinker-weights-access-token")
        return rest.copy_weights(who, body, token_owner(token), request.headers.get("x-idempotency-key"))

    @router.post("/weights_info")
    async def weights_info(request: Request, who: str = Owner) -> dict[str, Any]:
        path = _json_object(await request.body()).get("tinker_path")
        if not isinstance(path, str):
            raise WireError("weights_info: give tinker_path")
        return rest.weights_info(who, path, token_owner(request.headers.get("x-tinker-weights-access-token")))

    # --- sampling ---

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

    # --- training runs and checkpoints ---

    @router.get("/training_runs")
    async def list_runs(
        limit: int = 20, offset: int = 0, access_scope: str = "owned", project_id: str | None = None, who: str = Owner
    ) -> dict[str, Any]:
        return rest.list_training_runs(who, max(0, min(limit, 1000)), max(0, offset), access_scope, project_id)

    @router.get("/training_runs/{run_id}")
    async def get_run(run_id: str, access_scope: str = "owned", who: str = Owner) -> dict[str, Any]:
        return rest.get_training_run(who, run_id, access_scope)

    @router.get("/training_runs/{run_id}/checkpoints")
    async def run_checkpoints(run_id: str, who: str = Owner) -> dict[str, Any]:
        return rest.list_checkpoints(who, run_id)

    @router.get("/training_runs/{run_id}/checkpoints/{segment}/{name}/external_weights_urls")
    async def external_urls(run_id: str, segment: str, name: str, request: Request, who: str = Owner) -> dict[str, Any]:
        return rest.external_weights_urls(who, run_id, f"{segment}/{name}", base_url(request))

    @router.post("/training_runs/{run_id}/checkpoints/{segment}/{name}/publish")
    async def publish(run_id: str, segment: str, name: str, who: str = Owner) -> Response:
        rest.publish(who, run_id, f"{segment}/{name}", True)
        return Response(status_code=204)

    @router.delete("/training_runs/{run_id}/checkpoints/{segment}/{name}/publish")
    async def unpublish(run_id: str, segment: str, name: str, who: str = Owner) -> Response:
        rest.publish(who, run_id, f"{segment}/{name}", False)
        return Response(status_code=204)

    @router.put("/training_runs/{run_id}/checkpoints/{segment}/{name}/ttl")
    async def set_ttl(run_id: str, segment: str, name: str, request: Request, who: str = Owner) -> Response:
        ttl = _json_object(await request.body()).get("ttl_seconds")
        if ttl is not None and (not isinstance(ttl, int) or isinstance(ttl, bool)):
            raise WireError("ttl_seconds must be an integer or null")
        rest.set_ttl(who, run_id, f"{segment}/{name}", ttl)
        return Response(status_code=204)

    @router.delete("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}")
    async def delete_checkpoint(run_id: str, checkpoint_id: str, who: str = Owner) -> Response:
        rest.delete_checkpoint(who, run_id, checkpoint_id)
        return Response(status_code=204)

    @router.get("/checkpoints")
    async def checkpoints(limit: int = 100, offset: int = 0, who: str = Owner) -> dict[str, Any]:
        return rest.list_checkpoints(who, None, max(0, min(limit, 1000)), max(0, offset))

    @router.get("/download/{token}")
    async def download(token: str) -> Response:
        return FileResponse(rest.linked_file(token))

    # --- admin ---

    @router.get("/audit")
    async def audit(event_type: str = "all", day: str | None = None, who: str = Owner) -> dict[str, Any]:
        return rest.audit_log(who, event_type, day)

    @router.get("/billing/usage/events")
    async def billing(starting_on: str, ending_before: str, _owner: str = Owner) -> dict[str, Any]:
        return rest.billing_usage(starting_on, ending_before)

    @router.get("/billing/usage/checkpoints/current")
    async def storage(project_id: str | None = None, who: str = Owner) -> dict[str, Any]:
        return rest.storage_usage(who, project_id)

    @router.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def unknown(path: str, request: Request) -> Response:
        raise NotFound(
            f"kitchen serve does not implement {request.method} /api/v1/{path}: it serves the tinker SDK "
            f"{SDK_RANGE} API (see docs/reference/tinker-sdk-conformance.md for every call and its answer)"
        )

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
            headers = {}
            if getattr(exc, "invalid_token", False):  # the SDK replaces its JWT on this mark
                headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
            return JSONResponse({"detail": str(exc)}, status_code=getattr(exc, "status", status), headers=headers)

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
