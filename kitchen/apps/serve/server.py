"""`kitchen serve`: build the backend, the service and the app from settings, and run uvicorn.

Binding anything but a loopback address requires an API keys file: the server then refuses every
key not in it. The backend is the registry's (`kitchen.backends`), configured like a run's
(`local.device=cuda`, `noop.latency=...` overrides), so the server names no backend itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kitchen.apps.serve.app import create_app, tinker_router
from kitchen.apps.serve.catalog import read_models_file
from kitchen.apps.serve.keys import KeyCheck, read_keys_file
from kitchen.apps.serve.openai_router import openai_router_for
from kitchen.apps.serve.records import RecordStore
from kitchen.apps.serve.server_tools import ServerTools
from kitchen.apps.serve.service import TinkerService
from kitchen.apps.serve.signing import ServerSecret
from kitchen.engine.backends import get_backend_spec, make_backend
from kitchen.engine.errors import ConfigError
from kitchen.families.common.settings import check_renderer_name

log = logging.getLogger("kitchen.apps.serve")


class ServeSettings(BaseModel):
    """How `kitchen serve` runs (its command-line options)."""

    model_config = ConfigDict(extra="forbid")

    backend: str = Field("local", description="a registered backend to serve (local, noop, ...)")
    host: str = Field("127.0.0.1", description="address to bind; a non-loopback one needs api_keys")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0: any free port)")
    models: Path | None = Field(None, description="YAML file mapping model names to local folders or 'tiny'")
    api_keys: Path | None = Field(None, description="file with one API key (tml-...) per line")
    store: Path = Field(Path("serve-store"), description="folder for checkpoints, run records and tokenizers")
    full_finetune: bool = Field(False, description="train all weights instead of the LoRA the SDK asks for")
    max_body_mb: int = Field(256, ge=1, description="largest request body accepted, in MiB")
    long_poll_s: float = Field(20.0, gt=0, le=40, description="how long /retrieve_future waits before try_again")
    seed: int = Field(0, description="the backend's seed")
    renderer: str | None = Field(
        None, description="chat renderer of /v1/chat/completions; default: the one recommended for each model"
    )
    overrides: list[str] = Field(default_factory=list, description="backend settings, e.g. local.device=cuda")
    mcp_servers: dict[str, str] = Field(
        default_factory=dict,
        description="MCP servers whose tools the chat endpoint runs: name -> command line (stdio) or URL",
    )
    max_tool_rounds: int = Field(8, ge=1, description="rounds of MCP tool calls per chat choice before it is cut")

    @field_validator("renderer")
    @classmethod
    def _registered_renderer(cls, name: str | None) -> str | None:
        return check_renderer_name(name)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_service(settings: ServeSettings) -> tuple[TinkerService, KeyCheck]:
    """The service and key check `settings` describe; configuration mistakes raise ConfigError."""
    from kitchen.engine.config.loading import load_config
    from kitchen.engine.config.run import RunConfig

    if not is_loopback(settings.host) and settings.api_keys is None:
        raise ConfigError(
            f"--host {settings.host}: binding a non-loopback address requires --api-keys FILE "
            "(anyone who can reach the port could otherwise train and read checkpoints)"
        )
    catalog = read_models_file(settings.models)
    spec = get_backend_spec(settings.backend)
    config = load_config(RunConfig, None, [f"backend={settings.backend}", f"seed={settings.seed}", *settings.overrides])
    store = RecordStore(settings.store)
    keys = KeyCheck(
        read_keys_file(settings.api_keys) if settings.api_keys is not None else None, ServerSecret(store.folder)
    )
    backend = make_backend(config, store.checkpoint_dir)
    service = TinkerService(
        backend,
        spec,
        catalog,
        store,
        full_finetune=settings.full_finetune,
        long_poll_s=settings.long_poll_s,
        backend_settings=getattr(config, spec.name, None),
    )
    service.cache_tokenizers()
    return service, keys


def serve(settings: ServeSettings) -> None:
    """Run the server until interrupted; the backend is closed on the way out. The MCP servers
    start first, so one that cannot start stops `kitchen serve` before the model loads."""
    tools = ServerTools.open(settings.mcp_servers, settings.max_tool_rounds) if settings.mcp_servers else None
    try:
        _serve(settings, tools)
    finally:
        if tools is not None:
            tools.close()


def _serve(settings: ServeSettings, tools: ServerTools | None) -> None:
    import uvicorn

    service, keys = build_service(settings)
    routers = (tinker_router, openai_router_for(settings.renderer, tools))
    app = create_app(service, keys, max_body_bytes=settings.max_body_mb * 1024 * 1024, routers=routers)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    mcp = f", MCP tools {', '.join(sorted(tools.tools))}" if tools is not None else ""
    print(
        f"kitchen serve: backend {settings.backend}, models {', '.join(sorted(service.catalog.models))}, "
        f"store {settings.store}{mcp}, listening on http://{settings.host}:{settings.port}",
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_run(server, service))


async def _run(server: object, service: TinkerService) -> None:
    try:
        await server.serve()  # type: ignore[attr-defined]
    finally:
        await service.backend.close()
