"""Prometheus metrics of one server (``server.metrics = true``), served at ``/metrics`` over HTTP.

Labels are bounded: tool names are the registered ones (anything else is "unknown"), outcomes
are mongogate's error codes, rejection reasons are the policy's. The tenant is a label only
with ``server.metrics_tenant_labels`` (one series per tenant is unbounded). Each server has
its own registry, so two servers in one process (tests) never mix their counts.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from mongogate.audit import AuditLog
    from mongogate.indexing import IndexBudget
    from mongogate.memory import MessageSearch
    from mongogate.recall import IndexCache

#: seconds; a query tool call is a few ms, a slow database a few seconds
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
PATH = "/metrics"

_by_server: weakref.WeakKeyDictionary[Any, Metrics] = weakref.WeakKeyDictionary()


class _AuditCollector(Collector):
    """Fallback count of the audit log attached to these metrics (read at scrape time)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = weakref.ref(metrics)

    def collect(self) -> Iterable[Metric]:
        m = self._metrics()
        audit = m.audit if m is not None else None
        family = CounterMetricFamily(
            "mongogate_audit_fallbacks",
            "Audit events the MongoDB sink could not take, written to the fallback file instead",
        )
        family.add_metric([], float(audit.fallbacks if audit is not None else 0))
        yield family


class _RecallIndexCollector(Collector):
    """The recall index's size and refreshes (read at scrape time; zero without long-term memory)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = weakref.ref(metrics)

    def collect(self) -> Iterable[Metric]:
        m = self._metrics()
        index = m.recall_index if m is not None else None
        size = GaugeMetricFamily(
            "mongogate_recall_index_bytes",
            "Bytes the in-process recall indexes hold (estimate; mongogate_index_bytes has both kinds)",
        )
        size.add_metric([], float(index.nbytes() if index is not None else 0))
        yield size
        budget = GaugeMetricFamily(
            "mongogate_recall_index_budget_bytes",
            "memory.long_term.index_budget_mb, in bytes (shared with search_messages' indexes)",
        )
        budget.add_metric([], float(index.budget_bytes if index is not None else 0))
        yield budget
        scopes = GaugeMetricFamily("mongogate_recall_index_scopes", "Scopes held in the recall index")
        scopes.add_metric([], float(len(index) if index is not None else 0))
        yield scopes
        refreshes = CounterMetricFamily(
            "mongogate_recall_index_refreshes",
            "Recall index lookups: fresh (no memory read), unread (fresh, and the engine's write "
            "signal let it skip the revision read too), patch (changed memories read), rebuild (scope "
            "read whole), evict (a scope dropped past the budget)",
            labels=["kind"],
        )
        stats = index.stats if index is not None else None
        for kind, field in (
            ("fresh", "fresh"),
            ("unread", "unread"),
            ("patch", "patches"),
            ("rebuild", "rebuilds"),
            ("evict", "evictions"),
        ):
            refreshes.add_metric([kind], float(getattr(stats, field) if stats is not None else 0))
        yield refreshes


class _IndexBudgetCollector(Collector):
    """The one index budget of the process (recall's and message search's indexes), and message
    search's refreshes and derivation work (read at scrape time; zero before the services open)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = weakref.ref(metrics)

    def collect(self) -> Iterable[Metric]:
        m = self._metrics()
        search = m.message_search if m is not None else None
        budget = search.index.budget if search is not None else None
        size = GaugeMetricFamily(
            "mongogate_index_bytes",
            "Bytes the in-process indexes hold (estimate), by kind: memories (recall), messages "
            "(search_messages); one budget for both (memory.long_term.index_budget_mb)",
            labels=["kind"],
        )
        scopes = GaugeMetricFamily(
            "mongogate_index_scopes", "Scopes held in the in-process indexes", labels=["kind"]
        )
        evicted = CounterMetricFamily(
            "mongogate_index_evictions", "Scopes dropped past the one index budget, by kind", labels=["kind"]
        )
        unkept = CounterMetricFamily(
            "mongogate_index_unkept",
            "Scopes used for their call and not kept: the budget full and their tenant over its share "
            "(memory.long_term.index_tenant_share), by kind",
            labels=["kind"],
        )
        for kind in ("memories", "messages"):
            size.add_metric([kind], float(budget.nbytes(kind) if budget is not None else 0))
            scopes.add_metric([kind], float(budget.count(kind) if budget is not None else 0))
            evicted.add_metric([kind], float(budget.evicted[kind] if budget is not None else 0))
            unkept.add_metric([kind], float(budget.unkept[kind] if budget is not None else 0))
        yield from (size, scopes, evicted, unkept)
        yield from _budget_families(budget)
        yield from _message_search_families(search)


def _budget_families(budget: IndexBudget | None) -> Iterable[Metric]:
    """The budget, one tenant's share of it, and what the tenant holding most holds."""
    total = GaugeMetricFamily(
        "mongogate_index_budget_bytes", "memory.long_term.index_budget_mb, in bytes: both kinds together"
    )
    total.add_metric([], float(budget.budget_bytes if budget is not None else 0))
    share = GaugeMetricFamily(
        "mongogate_index_tenant_share_bytes",
        "What one tenant's indexes hold before, while the budget is full, its own scopes go first "
        "(memory.long_term.index_tenant_share of the budget)",
    )
    share.add_metric([], float(budget.share_bytes if budget is not None else 0))
    largest = GaugeMetricFamily(
        "mongogate_index_largest_tenant_bytes", "Bytes the indexes of the tenant holding the most hold"
    )
    held = budget.tenant_bytes() if budget is not None else None
    largest.add_metric([], float(max(held.values()) if held else 0))
    yield from (total, share, largest)


def _message_search_families(search: MessageSearch | None) -> Iterable[Metric]:
    refreshes = CounterMetricFamily(
        "mongogate_message_index_refreshes",
        "Message index lookups of search_messages: fresh, unread (the write signal let it skip the "
        "revision read), patch, rebuild (scope read whole), readback (a write was in flight)",
        labels=["kind"],
    )
    stats = search.index.stats if search is not None else None
    for kind, field in (
        ("fresh", "fresh"),
        ("unread", "unread"),
        ("patch", "patches"),
        ("rebuild", "rebuilds"),
        ("readback", "readbacks"),
    ):
        refreshes.add_metric([kind], float(getattr(stats, field) if stats is not None else 0))
    yield refreshes
    work = CounterMetricFamily(
        "mongogate_message_derivations",
        "search_messages' derivation work: derived (messages whose terms and vector were stored), "
        "embedded (messages sent to the model), embedded_chars, tokenized_chars, dropped (not "
        "queued: a queue was full), embedder_failures",
        labels=["what"],
    )
    fill = search.fill.stats if search is not None else None
    for what in ("derived", "embedded", "embedded_chars", "tokenized_chars", "dropped", "embedder_failures"):
        work.add_metric([what], float(getattr(fill, what) if fill is not None else 0))
    yield work
    queued = GaugeMetricFamily(
        "mongogate_message_derivations_queued", "Messages queued for search_messages' background derivation"
    )
    queued.add_metric([], float(search.fill.queued() if search is not None else 0))
    yield queued


class Metrics:
    """The server's counters; ``observe_call`` and ``observe_event`` feed them."""

    def __init__(self, tools: Iterable[str] = (), *, tenant_labels: bool = False) -> None:
        self.tools = frozenset(tools)
        self.tenant_labels = tenant_labels
        self.audit: AuditLog | None = None
        r = self.registry = CollectorRegistry()
        call_labels = ["tool", "outcome", *(["tenant"] if tenant_labels else [])]
        self.calls = Counter(
            "mongogate_tool_calls", "Tool calls by tool and outcome (ok or the error code)", call_labels,
            registry=r,
        )  # fmt: skip
        self.latency = Histogram(
            "mongogate_tool_call_seconds", "Tool call latency", ["tool"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.rejections = Counter(
            "mongogate_filter_rejections", "Refused query-tool calls (audit events) by reason", ["reason"],
            registry=r,
        )  # fmt: skip
        self.auth_failures = Counter(
            "mongogate_auth_failures",
            "Refused authentication: missing_token, invalid_token, insufficient_scope (HTTP 401/403)",
            ["reason"],
            registry=r,
        )
        self.lease_busy = Counter(
            "mongogate_lease_busy", "lease_busy answers (another turn or run holds the lease)", ["tool"],
            registry=r,
        )  # fmt: skip
        self.db_errors = Counter(
            "mongogate_database_errors", "Tool calls that failed on the database (storage_error)", ["tool"],
            registry=r,
        )  # fmt: skip
        self.type_mismatches = Counter(
            "mongogate_type_mismatches",
            "Stored values returned as null because they did not match the declared field type",
            ["tool"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "mongogate_audit_queue_depth", "Audit events waiting for the MongoDB writer", registry=r
        )
        self.queue_depth.set_function(lambda: float(self.audit.queue_depth) if self.audit else 0.0)
        r.register(_AuditCollector(self))
        self.recall_index: IndexCache | None = None
        r.register(_RecallIndexCollector(self))
        self.message_search: MessageSearch | None = None
        r.register(_IndexBudgetCollector(self))

    def tool_label(self, tool: object) -> str:
        return tool if isinstance(tool, str) and tool in self.tools else "unknown"

    def observe_call(self, tool: object, outcome: str, seconds: float, tenant: str | None) -> None:
        name = self.tool_label(tool)
        labels = [name, outcome, *([tenant or ""] if self.tenant_labels else [])]
        self.calls.labels(*labels).inc()
        self.latency.labels(name).observe(seconds)
        if outcome == "lease_busy":
            self.lease_busy.labels(name).inc()
        elif outcome == "storage_error":
            self.db_errors.labels(name).inc()

    def observe_mismatches(self, tool: object, mismatches: object) -> None:
        """A query result nulled drifted values (``type_mismatches``: documents per field)."""
        if isinstance(mismatches, dict):
            n = sum(v for v in mismatches.values() if isinstance(v, int) and not isinstance(v, bool))
            if n > 0:
                self.type_mismatches.labels(self.tool_label(tool)).inc(n)

    def observe_event(self, event: dict[str, Any]) -> None:
        """An audit event was written: count a rejection by its reason."""
        if event.get("event") == "filter_rejected":
            self.rejections.labels(str(event.get("reason"))[:64]).inc()

    def attach_recall_index(self, index: IndexCache) -> None:
        """Report the in-process recall index (its bytes against the budget, scopes, refreshes)."""
        self.recall_index = index

    def attach_message_search(self, search: MessageSearch) -> None:
        """Report search_messages' indexes (on the one budget) and its derivation work."""
        self.message_search = search

    def attach_audit(self, audit: AuditLog) -> None:
        self.audit = audit
        audit.observers.append(self.observe_event)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def register(server: object, metrics: Metrics) -> None:
    """Remember the metrics of ``server`` for the HTTP app (server/http.py)."""
    _by_server[server] = metrics


def metrics_of(server: object) -> Metrics | None:
    return _by_server.get(server)


def with_metrics(app: ASGIApp, server: object) -> ASGIApp:
    """``app`` plus the ``/metrics`` route and auth-failure counting, if ``server`` has metrics."""
    metrics = metrics_of(server)
    return app if metrics is None else MetricsApp(app, metrics)


class MetricsApp:
    """ASGI: answer ``GET /metrics``; count 401/403 answers of everything else by reason class."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope.get("path") == PATH:
            await self._serve(scope, send)
            return
        has_token = any(k == b"authorization" for k, _ in scope.get("headers", []))

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = int(message.get("status", 0))
                if status == 401:
                    self.metrics.auth_failures.labels("invalid_token" if has_token else "missing_token").inc()
                elif status == 403:
                    self.metrics.auth_failures.labels("insufficient_scope").inc()
            await send(message)

        await self.app(scope, receive, counting_send)

    async def _serve(self, scope: Scope, send: Send) -> None:
        if scope.get("method") not in ("GET", "HEAD"):
            await _respond(send, 405, b"method not allowed\n", "text/plain")
            return
        body = self.metrics.render()
        await _respond(send, 200, b"" if scope.get("method") == "HEAD" else body, CONTENT_TYPE_LATEST)


async def _respond(send: Send, status: int, body: bytes, content_type: str) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def samples(metrics: Metrics) -> Iterator[tuple[str, dict[str, str], float]]:
    """Every sample as (name, labels, value): for tests and `mongogate check`-style reports."""
    for family in metrics.registry.collect():
        for s in family.samples:
            yield s.name, dict(s.labels), s.value
