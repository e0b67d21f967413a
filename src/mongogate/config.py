"""Configuration: a TOML file validated by pydantic; MONGOGATE_<SECTION>__<KEY> overrides it."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from mongogate.errors import ConfigError
from mongogate.policy.spec import SUPPORTED_OPERATORS, QueryToolSpec

MEMORY_TOOL_NAMES = frozenset({"create_session", "append", "load_context", "begin_turn", "end_turn"})
RUN_TOOL_NAMES = frozenset({"save_checkpoint", "load_checkpoint", "run_events", "acquire_run", "release_run"})
RESERVED_TOOL_NAMES = MEMORY_TOOL_NAMES | RUN_TOOL_NAMES


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DatabaseSettings(Section):
    uri: str | None = None
    """Read-write connection for memory collections. Unset: start the embedded engine."""
    query_uri: str | None = None
    """Connection of a user with only the `read` role, used by query tools. Unset: `uri`."""
    name: str = "mongogate"
    timeout_ms: int = Field(default=5000, ge=100)


class ServerSettings(Section):
    data_dir: Path = Path(".mongogate")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    public_url: str | None = None
    """Where clients reach the server (for the protected-resource metadata). Default: http://host:port."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
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
    max_json_tokens: int = Field(default=100_000, ge=1000)
    """Most JSON objects, arrays and keys (`{`, `[`, `:`) in one request body; a denser body gets 413
    before it is parsed, so parsing never holds the event loop for more than about 50 ms."""


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
    api_keys: list[ApiKeyEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _mode_needs(self) -> AuthSettings:
        if self.mode == "jwt":
            keys = [k for k in (self.jwt_secret, self.jwt_public_key_file, self.jwks_file) if k is not None]
            if len(keys) != 1:
                raise ValueError("mode 'jwt' needs exactly one of jwt_secret, jwt_public_key_file, jwks_file")
        if self.mode == "api_keys" and not self.api_keys:
            raise ValueError("mode 'api_keys' needs at least one [[auth.api_keys]] entry")
        return self


class MemorySettings(Section):
    max_message_bytes: int = Field(default=256 * 1024, ge=1)
    default_context_limit: int = Field(default=40, ge=1)
    max_context_limit: int = Field(default=200, ge=1)
    lease_ms: int = Field(default=120_000, ge=100)
    max_lease_ms: int = Field(default=3_600_000, ge=100)
    max_id_length: int = Field(default=200, ge=8, le=1000)
    max_state_bytes: int = Field(default=1024 * 1024, ge=1)
    completed_run_ttl_s: int | None = Field(default=None, ge=60)


class PolicySettings(Section):
    allowed_operators: list[str] = Field(default_factory=lambda: sorted(SUPPORTED_OPERATORS))
    max_depth: int = Field(default=6, ge=1, le=50)
    max_nodes: int = Field(default=200, ge=1)
    max_in: int = Field(default=100, ge=1)
    max_string: int = Field(default=512, ge=1)
    max_response_bytes: int = Field(default=256 * 1024, ge=1024)

    @field_validator("allowed_operators")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = sorted(set(v) - SUPPORTED_OPERATORS)
        if unknown:
            raise ValueError(
                f"{unknown} cannot be allowed: the policy can only check {sorted(SUPPORTED_OPERATORS)}"
            )
        return v


class AuditSettings(Section):
    path: Path | None = None
    """Default: <server.data_dir>/audit.jsonl."""
    redact_values: bool = False
    log_queries: bool = False
    max_value_chars: int = Field(default=64, ge=8)


class LimitsSettings(Section):
    """Caps on every tool argument, checked before any schema, policy or database work."""

    max_argument_chars: int = Field(default=2 * 1024 * 1024, ge=1024)
    """Rough JSON size of one argument (strings, keys; numbers count 8)."""
    max_argument_keys: int = Field(default=10_000, ge=16)
    """Object keys plus array items, all levels, in one argument (and the number of arguments)."""
    max_argument_depth: int = Field(default=32, ge=2, le=200)
    metadata_max_chars: int = Field(default=16 * 1024, ge=64)
    """`create_session.metadata`: 16 KiB, 64 keys, 4 levels by default."""
    metadata_max_keys: int = Field(default=64, ge=1)
    metadata_max_depth: int = Field(default=4, ge=1, le=50)


class SchedulerSettings(Section):
    jitter_max_s: float = Field(default=60.0, ge=0)
    tick_timeout_s: float = Field(default=30.0, gt=0)
    idle_sleep_s: float = Field(default=1.0, gt=0)
    concurrency: int = Field(default=8, ge=1, le=256)


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
    query_tools: list[QueryToolSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _tools(self) -> Settings:
        seen: set[str] = set()
        allowed = set(self.policy.allowed_operators)
        for i, spec in enumerate(self.query_tools):
            where = f"query_tools[{i}] ({spec.name})"
            if spec.name in RESERVED_TOOL_NAMES:
                raise ValueError(f"{where}: name clashes with the built-in tool {spec.name!r}")
            if spec.name in seen:
                raise ValueError(f"{where}: duplicate tool name {spec.name!r}")
            seen.add(spec.name)
            outside = sorted(set(spec.operators) - allowed)
            if outside:
                raise ValueError(f"{where}: operators {outside} are outside policy.allowed_operators")
        return self

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
        # The environment overrides the file (which arrives as init kwargs).
        return (env_settings, init_settings)


def _format_errors(exc: ValidationError, origin: str) -> str:
    lines = [f"invalid configuration in {origin}:"]
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if isinstance(got, dict | list) or got is None else f" (got {got!r})"
        lines.append(f"  {key}: {msg}{shown}")
    return "\n".join(lines)


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Read the TOML file (``path`` or $MONGOGATE_CONFIG), apply the environment, validate.

    ``overrides`` are nested dicts merged over the file (used by tests and the Python API).
    """
    raw: dict[str, Any] = {}
    chosen = path if path is not None else os.environ.get("MONGOGATE_CONFIG")
    origin = "environment/defaults"
    if chosen:
        p = Path(chosen)
        origin = str(p)
        try:
            raw = tomllib.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError as e:
            raise ConfigError(
                f"config file {p} does not exist; pass --config PATH or set MONGOGATE_CONFIG"
            ) from e
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {p} is not valid TOML: {e}") from e
        base = p.parent
        # Relative paths in the file are relative to the file, not to the working directory.
        for section, key in (("auth", "jwt_public_key_file"), ("auth", "jwks_file")):
            val = raw.get(section, {}).get(key)
            if isinstance(val, str) and not Path(val).is_absolute():
                raw[section][key] = str(base / val)
    for section, values in overrides.items():
        if isinstance(values, dict) and isinstance(raw.get(section), dict):
            raw[section] = {**raw[section], **values}
        else:
            raw[section] = values
    try:
        return Settings(**raw)
    except ValidationError as e:
        raise ConfigError(_format_errors(e, origin)) from e
