"""OpenTelemetry traces (`server.tracing = true`; the `otel` extra): imported only then.

- One SERVER span per MCP request (server/observe.py opens it): named after the method (and the
  tool or prompt), with `mcp.method.name`, `mcp.protocol.version`, `jsonrpc.request.id`,
  `gen_ai.tool.name`, `mongogate.request_id` (the id in the log lines and error texts),
  `mongogate.tenant` (`server.tracing_tenant`: a hash by default, as is, or left out) and
  `mongogate.outcome` (`ok` or the error code); a failed call has status ERROR and `error.type`
  (the tool's error code, or the JSON-RPC code of a refused request). Its parent is the caller's
  W3C trace context: `_meta.traceparent` (protocol 2026-07-28 requests carry it; the SDK's
  clients add it on every revision), else the HTTP `traceparent` header, else a new trace.
- A CLIENT span per database command run inside a request (`CommandSpans`, a pymongo command
  listener on both clients): `db.system.name`, `db.operation.name`, `db.namespace`,
  `db.collection.name`, the server's address, `error.type` (the server's code name) on failure.
  A listener, not spans around domain calls: it sees every command of every package (memory,
  recall, policy, runs, the audit sink's own commands excluded: they run on its thread, outside
  any request), with the driver's own timing, and needs no code in the domain packages. It
  records names only: never a filter, a document or a value.
- An INTERNAL span per embedding batch (`TracedEmbedder`): `gen_ai.operation.name`
  "embeddings", `gen_ai.request.model`, the number of texts, never the texts.

Exporters, sampling and the resource come from the standard environment variables:
`OTEL_TRACES_EXPORTER` (`otlp`, the default, `console` on stderr, `none`, or a comma list),
`OTEL_EXPORTER_OTLP_ENDPOINT` / `..._TRACES_ENDPOINT`, `..._HEADERS`, `..._PROTOCOL`
(`http/protobuf`; `grpc` needs opentelemetry-exporter-otlp-proto-grpc), `OTEL_TRACES_SAMPLER`
(+ `_ARG`), `OTEL_SERVICE_NAME` (default "mongogate"), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_*`,
`OTEL_SDK_DISABLED`. mongogate's spans come from its own tracer provider, never the process's
global one, and replace the SDK's own per-request span (compat/sdk.py `drop_sdk_spans`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any, Literal, cast

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span, SpanKind, StatusCode
from pymongo import monitoring

from mongogate.errors import ConfigError
from mongogate.version import __version__

__all__ = ["CommandSpans", "TracedEmbedder", "Tracing", "exporters", "provider_from_env"]

log = logging.getLogger(__name__)
TenantMode = Literal["hashed", "plain", "none"]
#: database commands in flight with a span; past this many the oldest is ended (never a leak)
_OPEN_MAX = 10_000
_NAME_MAX = 128


class _Stderr:
    """Whatever `sys.stderr` is when a span is written (tests and the stdio server replace it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _one_line(span: Any) -> str:
    return str(span.to_json(indent=None)) + "\n"


def exporters(environ: Mapping[str, str]) -> list[SpanExporter]:
    """The exporters `OTEL_TRACES_EXPORTER` names (default `otlp`), made from the environment."""
    names = [n.strip() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    made: list[SpanExporter] = []
    for name in names:
        if name == "none":
            continue
        if name == "console":
            made.append(ConsoleSpanExporter(out=cast("IO[str]", _Stderr()), formatter=_one_line))
        elif name == "otlp":
            made.append(_otlp(environ))
        else:
            raise ConfigError(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r}; use otlp, console or none")
    return made


def _otlp(environ: Mapping[str, str]) -> SpanExporter:
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    try:
        if protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter,
            )

            http: SpanExporter = OTLPSpanExporter()
            return http
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter as GrpcExporter,
            )

            exporter: SpanExporter = GrpcExporter()
            return exporter
    except ImportError as e:
        raise ConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol} needs a package that is not installed ({e.name}): "
            "the otel extra installs http/protobuf; add opentelemetry-exporter-otlp-proto-grpc for grpc"
        ) from None
    raise ConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not offered; use http/protobuf or grpc")


def provider_from_env(environ: Mapping[str, str]) -> TracerProvider:
    """A tracer provider from the standard variables (module docstring); spans are batched and
    flushed when the process ends (the SDK's own exit hook)."""
    named = environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    base = {"service.version": __version__, **({} if named else {"service.name": "mongogate"})}
    provider = TracerProvider(resource=Resource.create(base))
    for exporter in exporters(environ):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def tenant_value(tenant: str, mode: TenantMode) -> str | None:
    """The tenant as a span shows it: 16 hex characters of its SHA-256 (stable, so one tenant's
    requests group; a guessed name can be confirmed, so it is a pseudonym, not a secret), the
    name itself, or nothing."""
    if mode == "none":
        return None
    if mode == "plain":
        return tenant
    return hashlib.sha256(("mongogate.tenant/1:" + tenant).encode("utf-8", "surrogatepass")).hexdigest()[:16]


class RequestTrace:
    """The span of one request, ended by the `with` that opened it."""

    def __init__(self, span: Span) -> None:
        self.span = span

    def ended(self, outcome: str, *, rpc_code: int | None = None, request_id: str | None = None) -> None:
        """`outcome`: "ok", a tool's error code, or "error" for a refused request (`rpc_code`)."""
        span = self.span
        span.set_attribute("mongogate.outcome", outcome)
        if request_id is not None:
            span.set_attribute("mongogate.request_id", request_id)
        if rpc_code is not None:
            span.set_attribute("rpc.response.status_code", str(rpc_code))
        if outcome != "ok":  # the error code, or a refused request's JSON-RPC code
            span.set_attribute("error.type", str(rpc_code) if outcome == "error" and rpc_code else outcome)
            span.set_status(StatusCode.ERROR)


def parent_context(meta: Mapping[str, Any] | None, headers: Mapping[str, str] | None) -> Context | None:
    """The caller's trace context: `_meta.traceparent` first, else the HTTP header; None (a new
    trace) when neither holds a valid one."""
    for carrier in (meta, headers):
        if not carrier or "traceparent" not in carrier:
            continue
        fields = {k: v for k in ("traceparent", "tracestate") if isinstance(v := carrier.get(k), str)}
        try:
            found = propagate.extract(fields)
        except (ValueError, TypeError):
            continue
        if trace.get_current_span(found).get_span_context().is_valid:
            return found
    return None


class Tracing:
    """mongogate's tracer, and what it puts on spans."""

    def __init__(self, provider: TracerProvider, tenant: TenantMode = "hashed") -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("mongogate", __version__)
        self.tenant_mode: TenantMode = tenant

    @contextlib.contextmanager
    def request(self, ctx: Any, name: str | None, tenant: str | None) -> Iterator[RequestTrace]:
        """The SERVER span of one request (`ctx`: the SDK's ServerRequestContext), current inside."""
        method = str(ctx.method)
        attrs: dict[str, Any] = {"mcp.method.name": method, "mcp.protocol.version": str(ctx.protocol_version)}
        if ctx.request_id is not None:
            attrs["jsonrpc.request.id"] = str(ctx.request_id)[:_NAME_MAX]
        if name is not None and method == "tools/call":
            attrs |= {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        elif name is not None:
            attrs["gen_ai.prompt.name"] = name
        shown = None if tenant is None else tenant_value(tenant, self.tenant_mode)
        if shown is not None:
            attrs["mongogate.tenant"] = shown
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        parent = parent_context(ctx.meta if isinstance(ctx.meta, Mapping) else None, headers)
        title = f"{method} {name}" if name else method
        with self.tracer.start_as_current_span(
            title,
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attrs,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield RequestTrace(span)

    def commands(self) -> CommandSpans:
        return CommandSpans(self.tracer)

    def embedder(self, inner: Any) -> TracedEmbedder:
        return TracedEmbedder(inner, self.tracer)


class CommandSpans(monitoring.CommandListener):
    """A CLIENT span per database command run inside a traced request (module docstring)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self._open: dict[int, Span] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if not trace.get_current_span().is_recording():
            return  # outside a request (start-up, background work): no orphan traces
        op = event.command_name
        coll = event.command.get(op)
        if not isinstance(coll, str):
            coll = event.command.get("collection")
        attrs: dict[str, Any] = {
            "db.system.name": "mongodb",
            "db.operation.name": op[:_NAME_MAX],
            "db.namespace": event.database_name[:_NAME_MAX],
        }
        if isinstance(coll, str):
            attrs["db.collection.name"] = coll[:_NAME_MAX]
        host, port = event.connection_id  # a Unix socket's path has no port
        attrs["server.address"] = str(host)[:_NAME_MAX]
        if isinstance(port, int):
            attrs["server.port"] = port
        name = f"{op} {coll}" if isinstance(coll, str) else op
        if len(self._open) >= _OPEN_MAX:
            self._open.pop(next(iter(self._open))).end()
        self._open[event.request_id] = self.tracer.start_span(
            name[:_NAME_MAX], kind=SpanKind.CLIENT, attributes=attrs
        )

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        span = self._open.pop(event.request_id, None)
        if span is not None:
            span.end()

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        span = self._open.pop(event.request_id, None)
        if span is None:
            return
        failure = event.failure if isinstance(event.failure, Mapping) else {}
        code = failure.get("codeName") or failure.get("code") or "error"
        span.set_attribute("error.type", str(code)[:_NAME_MAX])
        span.set_status(StatusCode.ERROR)
        span.end()


class TracedEmbedder:
    """An embedder whose every batch is an INTERNAL span (model and count; never the texts)."""

    def __init__(self, inner: Any, tracer: trace.Tracer) -> None:
        self.inner = inner
        self.tracer = tracer
        self.model: str = inner.model
        self.dimensions: int = inner.dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        attrs: dict[str, str | int] = {
            "gen_ai.operation.name": "embeddings",
            "gen_ai.request.model": str(self.model)[:_NAME_MAX],
            "mongogate.embedding.texts": len(texts),
        }
        with self.tracer.start_as_current_span(
            "embeddings", kind=SpanKind.INTERNAL, attributes=attrs
        ) as span:
            try:
                vectors: list[list[float]] = await self.inner.embed(texts)
            except Exception as e:
                span.set_attribute("error.type", type(e).__name__)
                span.set_status(StatusCode.ERROR)
                raise
            return vectors
