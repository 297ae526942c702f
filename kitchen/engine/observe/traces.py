"""What a run sends outside its JSONL files: metric sinks and OpenTelemetry traces.

Tracing: the runner makes one span per workflow and per stage through `opentelemetry-api`; by
default they go nowhere. With `opentelemetry-sdk` installed they are exported when
  - `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_TRACES_EXPORTER` is set (`otlp`, the default when only
    the endpoint is set, needs `opentelemetry-exporter-otlp`; `console` prints them; `none`), or
  - `trace_file: true`, which writes them to RUN_DIR/traces.jsonl (one span per line).
Every span carries `kitchen.run_id` (the run directory's name) and `kitchen.engine.recipe`; stage spans
also `kitchen.engine.stage` and `kitchen.step`. Every exporter gets the spans redacted (attributes, event
attributes such as an exception's message, status text), as events.jsonl is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kitchen.engine.hooks import Hooks
from kitchen.engine.observe.sinks import LoggingSettings, MetricSinksHook
from kitchen.engine.secrets import cached_secrets, redact, redact_value

TRACES_FILE = "traces.jsonl"


def sdk_installed() -> bool:
    return importlib.util.find_spec("opentelemetry.sdk") is not None


def _warn(message: str) -> None:
    print(f"kitchen: warning: {message}", file=sys.stderr)


@dataclass
class Observability:
    hooks: list[Hooks] = field(default_factory=list)
    tracer: Any = None
    """A tracer exporting this run's spans; None = the global one (a no-op unless set up elsewhere)."""
    provider: Any = None

    def attach(self, ctx: Any) -> None:
        if self.tracer is not None:
            ctx.tracer = self.tracer

    def close(self) -> None:
        if self.provider is not None:
            try:
                self.provider.shutdown()  # flushes batched spans
            except Exception as exc:
                _warn(f"trace export failed at shutdown: {exc}")


def start_observability(
    recipe: str, settings: LoggingSettings, run_dir: Path, extra_exporters: Sequence[Any] = ()
) -> Observability:
    """The hooks and tracer a run gets from its `logging` section and the environment."""
    result = Observability()
    if settings.loggers:
        result.hooks.append(MetricSinksHook(settings, run_dir, recipe))
    exporters = [*_exporters(settings.trace_file, run_dir), *extra_exporters]
    if exporters:
        result.provider = _provider(recipe, run_dir, exporters)
        result.tracer = result.provider.get_tracer("kitchen")
    return result


def _exporters(trace_file: bool, run_dir: Path) -> list[tuple[Any, bool]]:
    """(exporter, batched) pairs from the config and the OTEL_* environment."""
    wanted = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not wanted and endpoint:
        wanted = "otlp"
    if not trace_file and wanted in ("", "none"):
        return []
    if not sdk_installed():
        _warn("tracing asked for, but opentelemetry-sdk is not installed: pip install 'kitchen[otel]'")
        return []
    found: list[tuple[Any, bool]] = []
    if trace_file:
        found.append((JsonlSpanExporter(run_dir / TRACES_FILE), False))
    for name in [part.strip() for part in wanted.split(",") if part.strip() and part.strip() != "none"]:
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            found.append((ConsoleSpanExporter(), False))
        elif name == "otlp":
            exporter = _otlp_exporter()
            if exporter is not None:
                found.append((exporter, True))
        else:
            _warn(f"OTEL_TRACES_EXPORTER={name!r} is not supported by kitchen (otlp, console, none); ignored")
    return found


def _otlp_exporter() -> Any:
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    modules = ["opentelemetry.exporter.otlp.proto.http.trace_exporter"]
    grpc = "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"
    modules = [grpc, *modules] if protocol == "grpc" else [*modules, grpc]
    for module in modules:
        try:
            return importlib.import_module(module).OTLPSpanExporter()
        except ImportError:
            continue
        except Exception as exc:
            _warn(f"cannot create the OTLP trace exporter ({exc}); traces are not exported")
            return None
    _warn(
        "OTLP trace export asked for (OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_TRACES_EXPORTER), but "
        "opentelemetry-exporter-otlp is not installed; traces are not exported"
    )
    return None


def _provider(recipe: str, run_dir: Path, exporters: list[tuple[Any, bool]]) -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    attributes = {"kitchen.run_id": run_dir.name, "kitchen.recipe": recipe}

    class RunAttributes(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            span.set_attributes(attributes)

    provider = TracerProvider(resource=Resource.create({"service.name": "kitchen", **attributes}))
    provider.add_span_processor(RunAttributes())
    for exporter, batched in exporters:
        redacting: Any = RedactingSpanExporter(exporter)  # duck-typed: the SDK is an optional import
        provider.add_span_processor(BatchSpanProcessor(redacting) if batched else SimpleSpanProcessor(redacting))
    return provider


class RedactingSpanExporter:
    """Hands each span to `inner` with secrets redacted (`redacted_span`)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def export(self, spans: Sequence[Any]) -> Any:
        return self.inner.export([redacted_span(span) for span in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


def redacted_span(span: Any) -> Any:
    """A copy of a finished span whose name, attributes, events' attributes (an exception event
    holds the error message) and status text are redacted."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.trace import Status

    secrets = cached_secrets()
    description = span.status.description
    return ReadableSpan(
        name=redact(span.name, secrets),
        context=span.get_span_context(),
        parent=span.parent,
        resource=span.resource,
        attributes=redact_value(dict(span.attributes or {}), secrets),
        events=[
            Event(event.name, redact_value(dict(event.attributes or {}), secrets), event.timestamp)
            for event in span.events
        ],
        links=span.links,
        kind=span.kind,
        status=Status(span.status.status_code, redact(description, secrets) if description else None),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class JsonlSpanExporter:
    """Writes each finished span as one JSON line (name, ids, times, attributes, status, events)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            with self.path.open("a", encoding="utf-8") as handle:
                for span in spans:
                    handle.write(json.dumps(span_record(span)) + "\n")
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None: ...

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def span_record(span: Any) -> dict[str, Any]:
    context = span.get_span_context()
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": None if parent is None else f"{parent.span_id:016x}",
        "start_time_unix_nano": span.start_time,
        "end_time_unix_nano": span.end_time,
        "seconds": None if span.end_time is None else (span.end_time - span.start_time) / 1e9,
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [{"name": event.name, "attributes": dict(event.attributes or {})} for event in span.events],
    }
