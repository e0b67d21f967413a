"""Configuration: a TOML file validated by pydantic; MONGOGATE_<SECTION>__<KEY> overrides it.

Precedence (pydantic-settings sources): arguments given to ``load_settings`` > environment >
the file > defaults, merged key by key. Relative paths in the file are relative to the file.
"""

from __future__ import annotations

import os
import re
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from mongogate.compat.settings import PostReadToml
from mongogate.config_errors import env_problem, format_errors
from mongogate.errors import ConfigError
from mongogate.mongouri import uri_problem
from mongogate.specs import (
    MEMORY_TOOL_NAMES,
    RESERVED_TOOL_NAMES,
    RUN_TOOL_NAMES,
    SUPPORTED_OPERATORS,
    QueryToolSpec,
    supported_operators,
    tool_set_problem,
)
from mongogate.values import JSON_ESCAPE_FACTOR, RESPONSE_ENVELOPE

__all__ = [
    "MEMORY_TOOL_NAMES",
    "RESERVED_TOOL_NAMES",
    "RUN_TOOL_NAMES",
    "ConfigError",
    "Settings",
    "load_settings",
]


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
    than this, with what an append and a load_context cost there (they grow with the collection)."""

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
    keep_alive_timeout_s: float = Field(default=5.0, gt=0, le=300)
    """An idle keep-alive connection is closed after this long."""
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
    """Live MCP sessions (Mcp-Session-Id) of one principal; opening one more ends its least recently
    used idle one, or is refused with 429 [busy] when every one has a request in flight."""
    session_idle_timeout_s: float = Field(default=600.0, gt=0, le=86_400)
    """An MCP session with no request in flight for this long ends (its id then answers 404)."""
    probe_concurrency: int = Field(default=8, ge=1, le=1000)
    """`/healthz` and `/readyz` requests in flight at once: their own budget, answered even when
    `max_connections` is reached (503 beyond it)."""
    max_pending_heads_per_address: int = Field(default=64, ge=1, le=100_000)
    """Connections of one client address still sending their request head; one more closes that
    address's oldest such connection with 429."""


class ApiKeyEntry(Section):
    sha256: str
    tenant: str = Field(min_length=1)
    subject: str | None = None
    scopes: list[str] = Field(default_factory=list)

    @field_validator("sha256")
    @classmethod
    def _hex(cls, v: str) -> str:
        v = v.lower()
        if len(v) != 64 or any(c not in "0123456789abcdef" for c in v):
            raise ValueError("must be the 64-character hex SHA-256 digest of the key, not the key itself")
        return v


def _https_or_loopback(url: str) -> bool:
    """An https URL, or http to this machine (tests, a local identity provider)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return True
    return parts.scheme == "http" and parts.hostname in ("127.0.0.1", "::1", "localhost")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _endpoint_problem(url: str, *, key: bool) -> str | None:
    """Why an embeddings base URL is unusable, or None. An API key never travels over plain
    http to another machine; without a key, http to a local-network server (Ollama, vLLM) is fine."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as e:
        return f"not a URL ({e})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "give an http(s):// base URL such as https://api.openai.com/v1"
    if parts.username or parts.password or parts.query or parts.fragment:
        return "no credentials, query or fragment in the URL (the key comes from api_key_env)"
    if key and not _https_or_loopback(url):
        return "an API key is only sent over https:// (http:// only to 127.0.0.1, ::1 or localhost)"
    return None


class AuthSettings(Section):
    mode: Literal["none", "jwt", "api_keys"] = "none"
    tenant: str | None = None
    """stdio / mode "none": the fixed tenant of this server."""
    subject: str = "local"
    tenant_claim: str = "tenant_id"
    issuer: str | None = None
    audience: str | None = None
    leeway_s: int = Field(default=30, ge=0, le=600)
    max_token_lifetime_s: int = Field(default=24 * 3600, ge=60)
    """A JWT expiring later than this from now is refused (a leaked long-lived token stays useless)."""
    jwt_secret: SecretStr | None = None
    jwt_public_key_file: Path | None = None
    jwks_file: Path | None = None
    jwks_url: str | None = None
    """An identity provider's JWKS endpoint (https; http only on loopback): keys fetched and cached."""
    jwks_cache_s: int = Field(default=600, ge=1, le=86_400)
    """Fetched keys are used this long before the set is fetched again (a removed key stops working)."""
    jwks_refresh_interval_s: int = Field(default=60, ge=1, le=86_400)
    """At most one JWKS fetch per this interval, however many unknown `kid`s arrive."""
    advertise_issuer: bool = False
    """auth.issuer is an OAuth authorization server: name it in the protected-resource metadata."""
    api_keys: list[ApiKeyEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _mode_needs(self) -> AuthSettings:
        if self.mode == "jwt":
            sources = (self.jwt_secret, self.jwt_public_key_file, self.jwks_file, self.jwks_url)
            if len([k for k in sources if k is not None]) != 1:
                raise ValueError(
                    "mode 'jwt' needs exactly one of jwt_secret, jwt_public_key_file, jwks_file, jwks_url"
                )
        if self.jwks_url is not None and not _https_or_loopback(self.jwks_url):
            raise ValueError(
                "jwks_url must be an https:// URL (http:// only for 127.0.0.1, ::1 or localhost)"
            )
        if self.advertise_issuer and (
            self.mode != "jwt" or self.issuer is None or not _https_or_loopback(self.issuer)
        ):
            raise ValueError(
                "advertise_issuer needs mode 'jwt' and an issuer that is the authorization server's https:// "
                "URL (its OAuth metadata is at <issuer>/.well-known/oauth-authorization-server)"
            )
        if self.mode == "api_keys" and not self.api_keys:
            raise ValueError("mode 'api_keys' needs at least one [[auth.api_keys]] entry")
        return self


class EmbeddingSettings(Section):
    """`[memory.embedding]`: which model turns memory text into vectors (long-term memory)."""

    #: "local": the wordllama model shipped inside its wheel (offline, no key); "openai": an
    #: OpenAI-compatible embeddings endpoint (hosted APIs, Ollama, vLLM)
    provider: Literal["local", "openai"] = "local"
    #: the endpoint's base URL for provider "openai" (".../v1"; `/embeddings` is appended)
    url: str | None = None
    #: the model name sent to the endpoint (provider "openai")
    model: str | None = None
    #: the vector size the model returns (provider "openai"; checked on every answer)
    dimensions: int | None = Field(default=None, ge=1, le=8192)
    #: the NAME of the environment variable that holds the API key (never the key itself)
    api_key_env: str | None = None
    timeout_s: float = Field(default=10.0, gt=0, le=300)
    #: texts per embeddings request
    batch_size: int = Field(default=64, ge=1, le=2048)
    #: send `dimensions` in the request (OpenAI's text-embedding-3 models shorten their vectors to
    #: it; many local servers refuse the field); off: only check the answer's size
    request_dimensions: bool = False

    @model_validator(mode="after")
    def _provider_fields(self) -> EmbeddingSettings:
        remote = ("url", "model", "dimensions", "api_key_env")
        if self.provider == "local":
            stray = [f for f in remote if getattr(self, f) is not None]
            if stray:
                raise ValueError(
                    f"{', '.join(stray)} set with provider 'local' (the built-in model takes none); "
                    'set provider = "openai" to use an embeddings endpoint'
                )
            return self
        missing = [f for f in ("url", "model", "dimensions") if getattr(self, f) is None]
        if missing:
            raise ValueError(
                f"provider 'openai' needs {', '.join(missing)} (e.g. url = \"https://api.openai.com/v1\", "
                'model = "text-embedding-3-small", dimensions = 1536)'
            )
        problem = _endpoint_problem(str(self.url), key=self.api_key_env is not None)
        if problem:
            raise ValueError(f"url {self.url!r}: {problem}")
        if not 1 <= len(str(self.model)) <= 200 or any(not c.isprintable() for c in str(self.model)):
            raise ValueError("model must be 1 to 200 printable characters")
        if self.api_key_env is not None and not _ENV_NAME.fullmatch(self.api_key_env):
            raise ValueError(
                f"api_key_env {self.api_key_env!r} must be the NAME of an environment variable "
                "(letters, digits, _), e.g. OPENAI_API_KEY; the key itself never goes in the file"
            )
        return self


class LongTermSettings(Section):
    """`[memory.long_term]`: memories that outlive a session (remember / recall / forget)."""

    #: "tenant": every principal of a tenant shares its memories; "subject": each subject its own
    scope: Literal["tenant", "subject"] = "tenant"
    #: memories one scope may hold; a `remember` past it is refused, nothing written
    max_per_scope: int = Field(default=10_000, ge=1, le=10_000_000)
    max_text_bytes: int = Field(default=8 * 1024, ge=16, le=1024 * 1024)
    max_query_chars: int = Field(default=2000, ge=16, le=100_000)
    default_recall_limit: int = Field(default=5, ge=1)
    max_recall_limit: int = Field(default=50, ge=1, le=1000)
    #: bytes of a recall / list_memories response before it is cut (`truncated`)
    max_response_bytes: int = Field(default=256 * 1024, ge=1024)
    #: "auto": $vectorSearch where the deployment has it, else an exact scan in mongogate
    vector_search: Literal["auto", "atlas", "scan"] = "auto"
    vector_index_name: str = Field(default="mongogate_memory_vectors", min_length=1, max_length=64)
    #: the most vectors the exact scan reads for one recall (a scope larger than this: the newest)
    max_scan: int = Field(default=20_000, ge=100, le=1_000_000)
    max_ttl_days: int = Field(default=36_500, ge=1, le=36_500)
    #: bytes (MB) the in-process recall indexes of all scopes may hold; least recently used out first
    index_budget_mb: int = Field(default=256, ge=1, le=1_000_000)
    #: recall returns only memories scoring at least this (0 to 1); a recall's own min_score overrides
    #: (0.2: the lowest floor emptying as many unrelated questions as any higher one, tuning half of
    #: benchmarks/recall_quality.py; docs/decisions/recall-ranking.md)
    min_score: float = Field(default=0.2, ge=0.0, le=1.0)
    #: scopes the caller's token or API key must grant for every long-term memory tool, checked like
    #: a query tool's `required_scopes` (`[unauthorized]` naming the missing ones); empty: none
    required_scopes: list[str] = Field(default_factory=list, max_length=32)


class MemorySettings(Section):
    max_message_bytes: int = Field(default=256 * 1024, ge=1)
    default_context_limit: int = Field(default=40, ge=1)
    max_context_limit: int = Field(default=200, ge=1)
    lease_ms: int = Field(default=30_000, ge=100)
    max_lease_ms: int = Field(default=3_600_000, ge=100)
    max_id_length: int = Field(default=200, ge=8, le=1000)
    max_state_bytes: int = Field(default=1024 * 1024, ge=1)
    completed_run_ttl_s: int | None = Field(default=None, ge=60)
    #: erase sessions idle this many days and messages older than this (TTL indexes); None: keep
    retention_days: int | None = Field(default=None, ge=1, le=36_500)
    #: context reads advise compaction (`compaction_advised`) past this many unsummarised bytes
    compact_after_bytes: int = Field(default=64 * 1024, ge=1)
    #: whose conversations a caller sees: "scope" follows `long_term.scope` (per subject under
    #: "subject", per tenant under "tenant"); "tenant": always the tenant's (the older behaviour)
    conversations: Literal["scope", "tenant"] = "scope"
    long_term: LongTermSettings = Field(default_factory=LongTermSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)


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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MONGOGATE_",
        env_nested_delimiter="__",
        extra="forbid",
        nested_model_default_partial_update=True,
    )

    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    #: each entry built by QueryToolSpec(**entry), which picks the class by `kind` (specs.py)
    query_tools: list[QueryToolSpec] = Field(default_factory=list)
    #: the TOML file these settings were read from (None: environment and defaults only)
    _file: Path | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        self._file = _config_file.get()  # set by load_settings while it builds these settings

    @property
    def config_file(self) -> Path | None:
        return self._file

    @field_validator("query_tools")
    @classmethod
    def _tools(cls, v: list[QueryToolSpec], info: ValidationInfo) -> list[QueryToolSpec]:
        policy = info.data.get("policy")  # validated before query_tools (declared first)
        allowed = policy.allowed_operators if isinstance(policy, PolicySettings) else SUPPORTED_OPERATORS
        problem = tool_set_problem(v, allowed)
        if problem is not None:
            raise ValueError(problem)
        return v

    @field_validator("limits")
    @classmethod
    def _response_cap(cls, v: LimitsSettings, info: ValidationInfo) -> LimitsSettings:
        memory = info.data.get("memory")  # validated before limits (declared first)
        if isinstance(memory, MemorySettings):
            need = (
                max(JSON_ESCAPE_FACTOR * memory.max_message_bytes, memory.max_state_bytes) + RESPONSE_ENVELOPE
            )
            if v.max_response_bytes < need:
                raise ValueError(
                    f"max_response_bytes is {v.max_response_bytes}; it must be at least {need} (6 x "
                    "memory.max_message_bytes or memory.max_state_bytes, whichever is larger, plus 64 KiB), "
                    "so that one stored message or state always fits in a response"
                )
        return v

    @property
    def audit_path(self) -> Path:
        return self.audit.path or self.server.data_dir / "audit.jsonl"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # First wins: arguments, then the environment, then the file load_settings was given.
        return (init_settings, env_settings, _TomlFile(settings_cls, _config_file.get()))


#: the file load_settings is reading (a context variable: settings sources are built per class)
_config_file: ContextVar[Path | None] = ContextVar("mongogate_config_file", default=None)

#: paths in the file, resolved against the file's directory when relative
FILE_PATHS = (
    ("server", "data_dir"),
    ("audit", "path"),
    ("auth", "jwt_public_key_file"),
    ("auth", "jwks_file"),
)


#: the data directory when none is configured: next to the config file, else in the working directory
DEFAULT_DATA_DIR = ".mongogate"


class _TomlFile(PostReadToml):
    """The TOML source, with relative paths made relative to the file, not the working directory.

    A file without ``server.data_dir`` puts it next to itself (``<file's dir>/.mongogate``), so
    every command given the same file uses the same data directory wherever it runs from."""

    def after_read(self, data: dict[str, Any], path: Path) -> dict[str, Any]:
        base = path.parent
        server = data.setdefault("server", {})
        if isinstance(server, dict) and "data_dir" not in server:
            server["data_dir"] = DEFAULT_DATA_DIR
        for section, key in FILE_PATHS:
            table = data.get(section)
            value = table.get(key) if isinstance(table, dict) else None
            if isinstance(value, str) and not Path(value).expanduser().is_absolute():
                table[key] = str(base / value)  # type: ignore[index]
        return data


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Read the TOML file (``path`` or $MONGOGATE_CONFIG), apply the environment, validate.

    ``overrides`` are nested dicts that win over the environment and the file (tests, the
    Python API, command-line flags).
    """
    chosen = path if path is not None else os.environ.get("MONGOGATE_CONFIG")
    file = Path(chosen) if chosen else None
    if file is not None and not file.is_file():
        raise ConfigError(f"config file {file} does not exist; pass --config PATH or set MONGOGATE_CONFIG")
    token = _config_file.set(file)
    try:
        return Settings(**overrides)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {file} is not valid TOML: {e}") from e
    except ValidationError as e:
        raise ConfigError(format_errors(Settings, e, file, overrides)) from e
    except SettingsError as e:  # a value the environment source could not parse (e.g. bad JSON)
        raise ConfigError(env_problem(e)) from e
    finally:
        _config_file.reset(token)
