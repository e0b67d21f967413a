"""Configuration: a TOML file validated by pydantic; MONGOGATE_<SECTION>__<KEY> overrides it.

Precedence (pydantic-settings sources): arguments given to ``load_settings`` > environment >
the file > defaults, merged key by key. Relative paths in the file are relative to the file.
"""

from __future__ import annotations

import os
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from mongogate.compat.settings import PostReadToml
from mongogate.config_auth import ApiKeyEntry, AuthSettings
from mongogate.config_errors import env_problem, format_errors
from mongogate.config_memory import EmbeddingSettings, LongTermSettings, MemorySettings, MessageSearchSettings
from mongogate.config_sections import (
    AuditSettings,
    DatabaseSettings,
    LimitsSettings,
    PolicySettings,
    SchedulerSettings,
    Section,
    ServerSettings,
    WriteConcernSettings,
)
from mongogate.errors import ConfigError
from mongogate.specs import (
    MEMORY_TOOL_NAMES,
    RESERVED_TOOL_NAMES,
    RUN_TOOL_NAMES,
    SUPPORTED_OPERATORS,
    QueryToolSpec,
    tool_set_problem,
)
from mongogate.values import JSON_ESCAPE_FACTOR, RESPONSE_ENVELOPE

# The sections live by concern in config_sections.py (database, server, policy, audit, limits,
# scheduler), config_auth.py and config_memory.py; every caller imports them from here.
__all__ = [
    "MEMORY_TOOL_NAMES",
    "RESERVED_TOOL_NAMES",
    "RUN_TOOL_NAMES",
    "ApiKeyEntry",
    "AuditSettings",
    "AuthSettings",
    "ConfigError",
    "DatabaseSettings",
    "EmbeddingSettings",
    "LimitsSettings",
    "LongTermSettings",
    "MemorySettings",
    "MessageSearchSettings",
    "PolicySettings",
    "SchedulerSettings",
    "Section",
    "ServerSettings",
    "Settings",
    "WriteConcernSettings",
    "load_settings",
]


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
