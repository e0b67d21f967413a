"""Query tool specs: what an operator registers. Plain pydantic, no MCP."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

FieldType = Literal["string", "number", "int", "bool", "date", "objectId"]

#: operators the policy walk knows how to check; nothing else can ever be allowed
SUPPORTED_OPERATORS: frozenset[str] = frozenset(
    {"$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists", "$and", "$or", "$nor"}
)
DEFAULT_OPERATORS: tuple[str, ...] = ("$eq", "$ne", "$in", "$gt", "$gte", "$lt", "$lte", "$and", "$or")

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


class QueryToolSpec(BaseModel):
    """One scoped read-only query tool. The same model serves config files and the Python API."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = Field(min_length=1)
    collection: str = Field(min_length=1)
    tenant_field: str = Field(min_length=1)
    projection: list[str] = Field(min_length=1)
    fields: dict[str, FieldType] = Field(min_length=1)
    operators: list[str] = Field(default_factory=lambda: list(DEFAULT_OPERATORS))
    sort: dict[str, Literal[1, -1]] | None = None
    max_limit: int = Field(default=50, ge=1, le=10_000)
    max_time_ms: int = Field(default=2000, ge=1, le=600_000)
    required_scopes: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError("must start with a letter and hold only letters, digits, '_' or '-' (max 64)")
        return v

    @field_validator("operators")
    @classmethod
    def _operators(cls, v: list[str]) -> list[str]:
        unknown = sorted(set(v) - SUPPORTED_OPERATORS)
        if unknown:
            raise ValueError(
                f"operators {unknown} are not in the global allowlist; allowed: {sorted(SUPPORTED_OPERATORS)}"
            )
        return v

    @model_validator(mode="after")
    def _consistent(self) -> QueryToolSpec:
        for f in self.fields:
            if not f or f.startswith("$") or "\x00" in f:
                raise ValueError(f"field name {f!r} is empty, starts with '$' or contains NUL")
        tenant_paths = [
            f for f in self.fields if f == self.tenant_field or f.startswith(self.tenant_field + ".")
        ]
        if tenant_paths:
            raise ValueError(
                f"tenant_field {self.tenant_field!r} must not be a filterable field (found {tenant_paths}): "
                "the tenant is injected by the server, the model never names it"
            )
        undeclared = [p for p in self.projection if p not in self.fields and p not in ("_id",)]
        if undeclared:
            raise ValueError(f"projection fields {undeclared} are not declared in `fields`")
        if self.sort:
            bad = [s for s in self.sort if s not in self.fields]
            if bad:
                raise ValueError(f"sort fields {bad} are not declared in `fields`")
        return self
