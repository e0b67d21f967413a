"""OpenTelemetry traces (issue 40 item 5), with the SDK's real tracer provider and its in-memory
exporter: a SERVER span per request whose trace id is the caller's (`_meta.traceparent` in process,
the HTTP `traceparent` header over HTTP), the tool, the tenant hashed and the outcome on it, and
database and embedding spans inside it; without the `otel` SDK installed the package imports and
serves, and `server.tracing = true` is refused in words."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import RequestParamsMeta
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from mongogate.server.tracing import tenant_value
from tests.conftest import jwt_auth, make_settings
from tests.helpers import ROOT, ok

pytestmark = pytest.mark.anyio

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


def _traceparent(trace_id: str = TRACE) -> str:
    return f"00-{trace_id}-{PARENT}-01"


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _ctx(span: ReadableSpan) -> SpanContext:
    found = span.get_span_context()
    assert found is not None
    return found


def _request_span(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    [span] = [s for s in exporter.get_finished_spans() if s.name == name and s.kind == SpanKind.SERVER]
    return span


def _children(exporter: InMemorySpanExporter, parent: ReadableSpan) -> list[ReadableSpan]:
    me = _ctx(parent).span_id
    return [s for s in exporter.get_finished_spans() if s.parent is not None and s.parent.span_id == me]


def _check_recall_trace(exporter: InMemorySpanExporter, trace_id: str, tenant: str) -> None:
    span = _request_span(exporter, "tools/call recall")
    attrs = dict(span.attributes or {})
    assert _ctx(span).trace_id == int(trace_id, 16)  # the caller's trace
    assert span.parent is not None and span.parent.span_id == int(PARENT, 16)
    assert attrs["mcp.method.name"] == "tools/call" and attrs["gen_ai.tool.name"] == "recall"
    assert attrs["mongogate.outcome"] == "ok" and attrs["mongogate.tenant"] == tenant_value(tenant, "hashed")
    assert attrs["mongogate.tenant"] != tenant and span.end_time is not None and span.start_time is not None
    children = _children(exporter, span)
    db = [c for c in children if c.kind == SpanKind.CLIENT]
    assert db and all(dict(c.attributes or {})["db.system.name"] == "mongodb" for c in db)
    assert any(dict(c.attributes or {}).get("db.collection.name") == "memories" for c in db)
    [embed] = [c for c in children if c.name == "embeddings"]
    assert dict(embed.attributes or {})["mongogate.embedding.texts"] == 1  # the question, never its text
    assert all(_ctx(c).trace_id == int(trace_id, 16) for c in children)


async def test_in_process_the_request_span_continues_meta_traceparent(
    engine_uri: str, db_name: str, tmp_path: Path, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    settings = make_settings(engine_uri, db_name, tmp_path, server={"tracing": True})
    async with Client(build_server(settings, tracer_provider=provider)) as c:
        await ok(c, "remember", text="the office is in Lyon", key="office")
        exporter.clear()
        meta = cast(RequestParamsMeta, {"traceparent": _traceparent()})
        found = await c.call_tool("recall", {"query": "where is the office"}, meta=meta)
        assert not found.is_error
        _check_recall_trace(exporter, TRACE, "acme")
        failed = await c.call_tool("load_context", {"session_id": "no-such-session"})
        assert failed.is_error
    span = _request_span(exporter, "tools/call load_context")
    assert _ctx(span).trace_id != int(TRACE, 16)  # no traceparent: a trace of its own
    assert span.status.status_code == StatusCode.ERROR
    assert (
        dict(span.attributes or {})["error.type"] == dict(span.attributes or {})["mongogate.outcome"] != "ok"
    )


async def test_over_http_the_request_span_continues_the_traceparent_header(
    engine_uri: str, db_name: str, tmp_path: Path, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth(), server={"tracing": True})
    token = mint_dev_token(settings.auth, tenant="globex", ttl_s=600, subject="svc")
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    headers = {"Authorization": f"Bearer {token}", "traceparent": _traceparent(trace_id)}
    with BackgroundHttpServer(build_server(settings, transport="http", tracer_provider=provider)) as http:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as hc,
            Client(streamable_http_client(http.url, http_client=hc)) as c,
        ):
            await ok(c, "remember", text="the office is in Oslo", key="office")
            exporter.clear()
            assert not (await c.call_tool("recall", {"query": "where is the office"})).is_error
    _check_recall_trace(exporter, trace_id, "globex")


def test_without_the_otel_sdk_the_package_serves_and_tracing_is_refused_in_words(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """A process where `opentelemetry.sdk` cannot be imported (the extra not installed; the
    OpenTelemetry API is the MCP SDK's own dependency)."""
    script = f"""
import sys, anyio
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry.sdk" or name.startswith("opentelemetry.sdk."):
            raise ImportError(name=name)
sys.meta_path.insert(0, Hide())
from mcp import Client
from mongogate.errors import ConfigError
from mongogate.server.app import build_server
from tests.conftest import make_settings
from pathlib import Path
def settings(**over):
    return make_settings({engine_uri!r}, {db_name!r}, Path({str(tmp_path)!r}), **over)
async def main():
    async with Client(build_server(settings())) as c:
        r = await c.call_tool("create_session", {{}})
        assert not r.is_error, r
    try:
        build_server(settings(server={{"tracing": True}}))
    except ConfigError as e:
        print("REFUSED", e)
    assert "opentelemetry.sdk" not in sys.modules
anyio.run(main)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "REFUSED server.tracing needs the otel extra" in done.stdout
