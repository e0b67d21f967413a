"""Configuration sections of the database, the server, the query policy, the audit, the tool
limits and the scheduler (`[database]`, `[server]`, `[policy]`, `[audit]`, `[limits]`,
`[scheduler]`); the root `Settings` and how the file is read: config.py, which exports them all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mongogate.mongouri import uri_problem
from mongogate.specs import SUPPORTED_OPERATORS, supported_operators


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WriteConcernSettings(Section):
    w: Annotated[int, Field(ge=1)] | Literal["majority"] = "majority"
    """"majority", or a number of members (1 = the primary alone: a failover may lose writes)."""
    j: bool = True
    wtimeout_ms: int = Field(default=10_000, ge=0)
    """0 waits forever; else a write not acknowledged this soon fails (retryable; it may still apply)."""


class DatabaseSettings(Section):
    uri: str | None = None
    """Read-write connection for memory collections. Unset: start the embedded engine."""
    query_uri: str | None = None
    """Connection of a user with only the `read` role, used by query tools. Unset: `uri`."""
    name: str = "mongogate"
    timeout_ms: int = Field(default=5000, ge=100)
    """Server selection and connect timeout of every client, unless the URI sets its own
    ``serverSelectionTimeoutMS`` / ``connectTimeoutMS``."""
    write_concern: WriteConcernSettings = Field(default_factory=lambda: WriteConcernSettings())
    """Memory, run and scheduler writes: acknowledged by a majority, journaled (replica-set safe)."""
    read_concern: Literal["local", "majority", "linearizable"] = "majority"
    """Memory, run and scheduler reads: "majority" never sees a write a failover can roll back."""
    engine_idle_stop_s: float = Field(default=300.0, ge=0)
    """The embedded engine process stops after this long with no client connected."""
    engine_size_warning: int = Field(default=1000, ge=1)
    """Embedded engine: `check` and the start-up log warn for a collection holding more documents
    than this: sorted and text reads scan it (a load_context's cost is named; writes stay flat)."""

    @field_validator("uri", "query_uri")
    @classmethod
    def _mongodb_uri(cls, v: str | None) -> str | None:
        problem = None if v is None else uri_problem(v)
        if problem is not None:
            raise ValueError(problem)
        return v


class ServerSettings(Section):
    data_dir: Path = Path(".mongogate")
    """Relative: to the config file (default: next to it), or to the working directory without one."""
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    public_url: str | None = None
    """Where clients reach the server (for the protected-resource metadata). Default: http://host:port."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    """`serve`'s level; `worker` logs at INFO (one line per tick) unless this is set explicitly."""
    log_format: Literal["text", "json"] = "text"
    """"json": one object per line on stderr (ts, level, logger, message, request_id, tenant, ...)."""
    metrics: bool = False
    """Serve Prometheus `/metrics` beside `/mcp` (HTTP only; same address, Host guard, no token)."""
    metrics_tenant_labels: bool = False
    """Label tool-call metrics with the tenant (unbounded cardinality: off unless tenants are few)."""
    tracing: bool = False
    """Export OpenTelemetry traces (the `otel` extra): a span per MCP request, with database and
    embedding spans inside; exporters, sampling and endpoint from the standard `OTEL_*` variables
    (`OTEL_TRACES_EXPORTER`: otlp, console, none). Off: nothing of the OpenTelemetry SDK is loaded."""
    tracing_tenant: Literal["hashed", "plain", "none"] = "hashed"
    """The tenant on each request span: a hash of it (a pseudonym: one tenant's requests group), the
    name as is, or none."""
    instance_id: str | None = Field(default=None, min_length=1, max_length=200)
    """This process's name in audit events and logs. Default: host:pid:random."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Further Host values accepted besides the bound host:port (and localhost forms on loopback):
    "name" (any port), "name:port" or "name:*"; ["*"] turns the check off (a proxy checks Host)."""
    allowed_origins: list[str] = Field(default_factory=list)
    """Further browser Origins accepted ("https://app.example", "http://name:*")."""
    header_timeout_s: float = Field(default=10.0, gt=0, le=300)
    """A connection must send a complete request head this soon (after connecting, or between requests)."""
    body_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    """A request body must arrive whole this soon after its head; else 408 and the connection closes."""
    max_connections: int = Field(default=200, ge=2, le=100_000)
    """Open connections (idle, streaming or in flight); a request beyond it gets 503."""
    keep_alive_timeout_s: float = Field(default=30.0, gt=0, le=300)
    """An idle keep-alive connection is closed after this long; longer than clients keep one
    (httpx and Node: 4-5 s), so the client closes first and never sends on a closing one."""
    keep_alive_max_requests: int = Field(default=1000, ge=1)
    """Requests served on one connection before it is closed (the client reconnects)."""
    max_request_bytes: int = Field(default=4 * 1024 * 1024, ge=64 * 1024)
    """Largest request body; larger ones get 413 before being read."""
    stateless: bool = False
    """Streamable HTTP without server-side MCP sessions: any server process answers any request."""
    ready_timeout_s: float = Field(default=2.0, gt=0, le=60)
    """`GET /readyz` answers 503 when a database ping takes longer than this."""
    max_json_tokens: int = Field(default=100_000, ge=1000)
    """Most JSON objects, arrays and keys (`{`, `[`, `:`) in one request body; a denser body gets 413
    before it is parsed, so parsing never holds the event loop for more than about 50 ms."""
    max_sessions_per_principal: int = Field(default=32, ge=1, le=100_000)
    """What one principal may hold: its live MCP sessions (Mcp-Session-Id; opening one more ends its
    least recently used idle one, or is refused with 429 [busy] when every one has a request in
    flight), and where a request opens no session (protocol 2026-07-28, a stateless server) its
    requests in flight at once (one more is refused with 429 [busy], nothing run)."""
    session_idle_timeout_s: float = Field(default=600.0, gt=0, le=86_400)
    """An MCP session with no request in flight for this long ends (its id then answers 404)."""
    probe_concurrency: int = Field(default=8, ge=1, le=1000)
    """`/healthz` and `/readyz` requests in flight at once: their own budget, answered even when
    `max_connections` is reached (503 beyond it)."""
    max_pending_heads_per_address: int = Field(default=64, ge=1, le=100_000)
    """Connections of one client address still sending their request head; one more closes that
    address's oldest such connection with 429."""


def https_or_loopback(url: str) -> bool:
    """An https URL, or http to this machine (tests, a local identity provider)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return True
    return parts.scheme == "http" and parts.hostname in ("127.0.0.1", "::1", "localhost")


class PolicySettings(Section):
    allowed_operators: list[str] = Field(default_factory=lambda: sorted(SUPPORTED_OPERATORS))
    max_depth: int = Field(default=6, ge=1, le=50)
    max_nodes: int = Field(default=200, ge=1)
    max_in: int = Field(default=100, ge=1)
    max_string: int = Field(default=512, ge=1)
    max_response_bytes: int = Field(default=256 * 1024, ge=1024)
    #: `count: true` on a find tool counts at most this many matches (`matched_capped` beyond)
    max_count: int = Field(default=10_000, ge=1, le=10_000_000)

    @field_validator("allowed_operators")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        return supported_operators(v)


class AuditSettings(Section):
    path: Path | None = None
    """Default: <server.data_dir>/audit.jsonl."""
    redact_values: bool = False
    """Audit events name the refused operators and paths but keep no value a model sent."""
    log_queries: bool = False
    """Also audit every query-tool call that ran (one `query` event each: tool, tenant, filter shape),
    not only refused ones; `mongogate try --audit` shows what one would hold."""
    max_value_chars: int = Field(default=64, ge=8)
    """Each value copied into an audit event is clipped to this many characters."""
    sink: Literal["file", "mongodb", "both"] = "file"
    """"mongodb": the `audit_events` collection (read-write connection), shared by every server;
    the file then only receives events the database could not take (counted)."""
    retention_days: int | None = Field(default=90, ge=1)
    """TTL of `audit_events` documents; None keeps them forever. The file is never trimmed."""
    queue_size: int = Field(default=10_000, ge=10)
    """Events waiting for the MongoDB writer; beyond it they go to the file (counted), never dropped."""


class LimitsSettings(Section):
    """Caps on every tool argument, checked before any schema, policy or database work."""

    max_argument_chars: int = Field(default=2 * 1024 * 1024, ge=1024)
    """Rough JSON size of one argument (strings, keys; numbers count 8)."""
    max_argument_keys: int = Field(default=10_000, ge=16)
    """Object keys plus array items, all levels, in one argument (and the number of arguments)."""
    max_argument_depth: int = Field(default=32, ge=2, le=200)
    """Nesting levels of one argument (objects and arrays); deeper is refused before it is walked."""
    metadata_max_chars: int = Field(default=16 * 1024, ge=64)
    """`create_session.metadata`: 16 KiB, 64 keys, 4 levels by default."""
    metadata_max_keys: int = Field(default=64, ge=1)
    metadata_max_depth: int = Field(default=4, ge=1, le=50)
    max_response_bytes: int = Field(default=4 * 1024 * 1024, ge=256 * 1024)
    """The result of every memory, session and run tool, as compact JSON (query tools have
    `policy.max_response_bytes`); what does not fit is left out and reported (`truncated`). At
    least 6 x `memory.max_message_bytes` and `memory.max_state_bytes`, plus 64 KiB, so that any
    one stored message or state always fits."""
    tenant_concurrency: int = Field(default=4, ge=1, le=10_000)
    """Tool calls one tenant runs at once on a server process (all its tokens and sessions together)."""
    tenant_queue: int = Field(default=32, ge=0, le=100_000)
    """Calls of a tenant waiting for one of its slots; one more is refused at once with [busy]."""
    tenant_queue_timeout_ms: int = Field(default=5000, ge=0, le=600_000)
    """How long a call waits for a slot of its tenant before [busy] (0: never wait)."""


class SchedulerSettings(Section):
    #: start-up spread of overdue ticks; each agent's is also capped at its own interval
    jitter_max_s: float = Field(default=60.0, ge=0)
    #: missed slots: "skip" to the next future slot (counted), or run "all" of them
    catch_up: Literal["skip", "all"] = "skip"
    tick_timeout_s: float = Field(default=30.0, gt=0)
    idle_sleep_s: float = Field(default=1.0, gt=0)
    concurrency: int = Field(default=8, ge=1, le=256)
    #: a tick later than this past its slot is skipped and counted, not run (None: no limit);
    #: an agent's own `misfire_grace_s` wins. `catch_up` is the default of an agent's `coalesce`
    misfire_grace_s: float | None = Field(default=None, gt=0)
    #: ticks of one agent in flight at once (1: a long tick never overlaps its own next slot)
    max_running: int = Field(default=1, ge=1, le=64)
    #: a worker not seen for this long no longer counts as registering its agents (orphans, prune)
    worker_ttl_s: float = Field(default=60.0, gt=0)
    #: a new interval agent's first slot is on its own phase of the interval (a stable offset
    #: from a hash of its key, or its `offset_s`), so agents sharing an interval do not all fall
    #: due at once; False: due at registration (an agent's own `offset_s` still applies)
    spread: bool = True
