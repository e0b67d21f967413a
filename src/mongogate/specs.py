"""Query tool specs and the rules for a set of tools: one definition for config files and code.

A base module (no policy, no MCP): config.py validates ``[[query_tools]]`` with it, and the
registry applies the same rules to specs added from Python. Errors through the Python API are
ConfigErrors naming the spec, the key and what is expected.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mongogate.errors import ConfigError, unknown_key

FieldType = Literal["string", "number", "int", "bool", "date", "objectId"]

#: operators the policy walk knows how to check; nothing else can ever be allowed
SUPPORTED_OPERATORS: frozenset[str] = frozenset(
    {"$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists", "$and", "$or", "$nor"}
)
DEFAULT_OPERATORS: tuple[str, ...] = ("$eq", "$ne", "$in", "$gt", "$gte", "$lt", "$lte", "$and", "$or")

#: pipeline stages the aggregation walk knows how to check; nothing else can ever be allowed
SUPPORTED_STAGES: tuple[str, ...] = (
    "$match",
    "$group",
    "$sort",
    "$limit",
    "$skip",
    "$project",
    "$count",
    "$sortByCount",
    "$unwind",
)
#: accumulators the aggregation walk knows how to check (and the default allowlist)
SUPPORTED_ACCUMULATORS: tuple[str, ...] = ("$sum", "$avg", "$min", "$max", "$count", "$first", "$last")
#: field types an accumulator may read by default
MEASURE_TYPES = frozenset({"number", "int", "date"})

MEMORY_TOOL_NAMES = frozenset(
    {
        "create_session",
        "append",
        "load_context",
        "compact_context",
        "begin_turn",
        "renew_turn",
        "end_turn",
        "list_sessions",
        "delete_session",
    }
)
RUN_TOOL_NAMES = frozenset({"save_checkpoint", "load_checkpoint", "run_events", "acquire_run", "release_run"})
RECALL_TOOL_NAMES = frozenset(
    {"remember", "recall", "forget", "list_memories", "memory_history", "search_messages"}
)
#: names of built-in tools: a query tool can never take one. The configuration check needs them
#: before any tool is built (and this layer never imports `tools/`), so they are listed here and
#: pinned to the names the factories make by tests/tools/test_reserved_names.py.
RESERVED_TOOL_NAMES = MEMORY_TOOL_NAMES | RUN_TOOL_NAMES | RECALL_TOOL_NAMES

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


class SpecError(ConfigError, ValueError):
    """A spec that does not validate. A ConfigError for the Python API; a ValueError so that
    pydantic reports it in place (``query_tools.0.operators``) when a config file holds it."""

    def __init__(self, what: str, problems: list[tuple[str, str]]) -> None:
        self.problems = problems  # (key inside the spec, what is wrong and what is expected)
        super().__init__("\n".join([f"{what}: invalid spec", *(f"  {k}: {m}" for k, m in problems)]))


def names_tenant(path: str, tenant_field: str) -> bool:
    """Whether ``path`` is the tenant field or inside it: the one rule every check applies (the
    server injects the tenant; the model never filters, sorts, reads, groups or names it)."""
    return path == tenant_field or path.startswith(tenant_field + ".")


def overlaps_tenant(path: str, tenant_field: str) -> bool:
    """Whether a field at ``path`` is, is inside, or holds the tenant field: a spec never declares
    one (reading a parent would read the tenant too)."""
    return names_tenant(path, tenant_field) or names_tenant(tenant_field, path)


def usable_name(name: object) -> TypeGuard[str]:
    """A field name MongoDB can take as written: a non-empty string without NUL. (A leading ``$``
    is an operator: each walk tells it apart first, with its own reason code.)"""
    return isinstance(name, str) and bool(name) and "\x00" not in name


#: what a field name never holds: control, format (bidirectional overrides, zero-width), line and
#: paragraph separators, surrogates. Such a name reaches tool descriptions the model reads and the
#: terminal of whoever lists the tools; no real schema needs one.
_UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def hidden_characters(name: str) -> list[str]:
    """The control and bidirectional characters in ``name``, as ``U+XXXX`` (empty: none)."""
    return [
        f"U+{ord(c):04X}" for c in dict.fromkeys(name) if unicodedata.category(c) in _UNPRINTABLE_CATEGORIES
    ]


def _printable(name: str, what: str) -> None:
    hidden = hidden_characters(name)
    if hidden:
        raise ValueError(
            f"{what} {name!r} holds control or bidirectional characters ({', '.join(hidden)}): a tool's "
            "description would carry them to the model and the terminal; rename the field in the data, "
            "or leave it out of the spec"
        )


class QueryToolSpec(BaseModel):
    """One scoped read-only query tool: what find and aggregate tools share.

    Calling ``QueryToolSpec(...)`` builds the kind its ``kind`` names (``FindToolSpec`` by
    default, ``AggregateToolSpec``): one constructor for config files and the Python API, and
    ``isinstance(spec, QueryToolSpec)`` holds for both kinds."""

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
    #: "find" (the default) or "aggregate" (a pipeline tool: see policy/aggregate_walk.py)
    kind: Literal["find", "aggregate"] = "find"
    #: key pattern of an index that starts with the tenant field; every query runs with it as `hint`
    index: list[tuple[str, Literal[1, -1]]] | None = None

    if not TYPE_CHECKING:  # type checkers keep pydantic's typed signature

        def __new__(cls, **data: Any) -> QueryToolSpec:
            """``QueryToolSpec(...)`` is the factory: the class is chosen by ``kind``."""
            return object.__new__(spec_class(data) if cls is QueryToolSpec else cls)

        def __init__(self, **data: Any) -> None:
            """Built from Python: a bad spec is a ConfigError (config files get their own report)."""
            try:
                super().__init__(**data)
            except ValidationError as e:
                raise SpecError(_what(data), spec_problems(e)) from None

        def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> QueryToolSpec:
            """A copy; with ``update``, validated like a new spec and of the kind it then names
            (pydantic's own copy skips validation: a tenant field in ``fields`` would slip in)."""
            if not update:
                return super().model_copy(deep=deep)
            return QueryToolSpec(**{**self.model_dump(), **update})

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError("must start with a letter and hold only letters, digits, '_' or '-' (max 64)")
        return v

    @field_validator("tenant_field")
    @classmethod
    def _tenant_field(cls, v: str) -> str:
        # injected as {tenant_field: tenant}: "$comment" or "$expr" there would match every document
        if not usable_name(v) or v.startswith("$"):
            raise ValueError("must be a field name: not starting with '$' and without NUL (e.g. 'tenantId')")
        _printable(v, "tenant_field")
        return v

    @field_validator("collection")
    @classmethod
    def _collection(cls, v: str) -> str:
        # what MongoDB (and pymongo) refuse, or reserve: caught here rather than at the first call
        if "$" in v or "\x00" in v or ".." in v or v.startswith((".", "system.")) or v.endswith("."):
            raise ValueError(
                "is not a usable collection name (no '$', NUL, '..', leading or trailing '.', "
                "or 'system.' prefix)"
            )
        return v

    @field_validator("operators")
    @classmethod
    def _operators(cls, v: list[str]) -> list[str]:
        return supported_operators(v)

    @model_validator(mode="after")
    def _consistent(self) -> QueryToolSpec:
        for f in self.fields:
            if not usable_name(f) or f.startswith("$"):
                raise ValueError(f"field name {f!r} is empty, starts with '$' or contains NUL")
            _printable(f, "field name")
        for f in self.projection:
            _printable(f, "projection field")
        tenant = self.tenant_field
        tenant_paths = [f for f in self.fields if overlaps_tenant(f, tenant)]
        if tenant_paths:
            raise ValueError(
                f"tenant_field {tenant!r} must not be a filterable field (found {tenant_paths}): "
                "the tenant is injected by the server, the model never names it"
            )
        self._declared()
        if self.index is not None:
            _check_index(self.index, tenant)
        return self

    def _declared(self) -> None:
        """Every projection and sort field is one of `fields` (`_id` may be projected too)."""
        undeclared = [p for p in self.projection if p not in self.fields and p not in ("_id",)]
        if undeclared:
            raise ValueError(
                f"projection fields {undeclared} are not declared in `fields`: declare each there with its "
                "type, or drop it from `projection`"
            )
        bad = [s for s in self.sort or () if s not in self.fields]
        if bad:
            raise ValueError(f"sort fields {bad} are not declared in `fields`")


class FindToolSpec(QueryToolSpec):
    """A find tool: the model writes a filter (policy/filters.py), a sort, a limit, ``count``."""

    kind: Literal["find"] = "find"

    @model_validator(mode="before")
    @classmethod
    def _no_aggregate_keys(cls, data: Any) -> Any:
        """An aggregate-only key is told as such (not as an unknown key). One left at its default
        value is dropped, as the one flat model of earlier versions accepted it."""
        if not isinstance(data, dict):
            return data
        keys = AggregateToolSpec.only_keys()
        given = sorted(k for k in keys & data.keys() if data[k] != keys[k])
        if given:
            raise ValueError(f'{given} apply to kind = "aggregate" tools only')
        return {k: v for k, v in data.items() if k not in keys}


class AggregateToolSpec(QueryToolSpec):
    """An aggregation tool: the model writes a pipeline (policy/aggregate_walk.py). The keys
    below are its own; the defaults of the field lists are filled in from the projection."""

    kind: Literal["aggregate"] = "aggregate"
    group_fields: list[str] | None = None
    measure_fields: list[str] | None = None
    accumulators: list[str] = Field(default_factory=lambda: list(SUPPORTED_ACCUMULATORS))
    stages: list[str] = Field(default_factory=lambda: list(SUPPORTED_STAGES))
    #: projected fields that hold arrays: the only fields `$unwind` may name
    array_fields: list[str] = Field(default_factory=list)
    max_stages: int = Field(default=8, ge=1, le=32)
    max_groups: int = Field(default=1000, ge=1, le=100_000)

    @classmethod
    def only_keys(cls) -> dict[str, Any]:
        """The keys only aggregation tools take, with their default values."""
        return {
            k: f.get_default(call_default_factory=True)
            for k, f in cls.model_fields.items()
            if k not in QueryToolSpec.model_fields
        }

    @model_validator(mode="after")
    def _aggregate(self) -> AggregateToolSpec:
        projected = set(self.projection)
        for key, names in (
            ("group_fields", self.groupable),
            ("measure_fields", self.measurable),
            ("array_fields", self.array_fields),
        ):
            outside = [n for n in names if n not in projected or n == "_id"]
            if outside:
                raise ValueError(f"{key} {outside} are not projected fields (the model can only read those)")
        wrong = [m for m in self.measurable if self.fields.get(m) not in MEASURE_TYPES]
        if wrong:
            raise ValueError(f"measure_fields {wrong} must be declared number, int or date")
        for key, got, known in (
            ("accumulators", self.accumulators, SUPPORTED_ACCUMULATORS),
            ("stages", self.stages, SUPPORTED_STAGES),
        ):
            unknown = sorted(set(got) - set(known))
            if unknown:
                raise ValueError(
                    f"{key} {unknown} cannot be allowed: the walk can only check {', '.join(known)}"
                )
        return self

    @property
    def groupable(self) -> list[str]:
        """Fields that may be group keys (default: the projection)."""
        if self.group_fields is not None:
            return list(self.group_fields)
        return [p for p in self.projection if p != "_id"]

    @property
    def measurable(self) -> list[str]:
        """Fields accumulators may read (default: projected number, int and date fields)."""
        if self.measure_fields is not None:
            return list(self.measure_fields)
        return [p for p in self.projection if self.fields.get(p) in MEASURE_TYPES]


#: the discriminated union: ``kind`` names the class
SPEC_KINDS: dict[str, type[QueryToolSpec]] = {"find": FindToolSpec, "aggregate": AggregateToolSpec}


def spec_class(data: dict[str, Any]) -> type[QueryToolSpec]:
    """The spec class ``data`` asks for by its ``kind`` (absent: find)."""
    kind = data.get("kind", "find")
    if isinstance(kind, str) and kind in SPEC_KINDS:
        return SPEC_KINDS[kind]
    shown = "" if kind is None or isinstance(kind, dict | list) else f" (got {kind!r})"
    names = " or ".join(repr(k) for k in SPEC_KINDS)
    raise SpecError(_what(data), [("kind", f"Input should be {names}{shown}")])


def _what(data: dict[str, Any]) -> str:
    name = data.get("name")
    return f"query tool {name!r}" if name else "query tool"


def _check_index(index: Sequence[tuple[str, int]], tenant_field: str) -> None:
    if not index or index[0][0] != tenant_field:
        raise ValueError(
            f"index must start with the tenant field {tenant_field!r}, e.g. [[{tenant_field!r}, 1], ...]: "
            "every query is bounded by the caller's own data"
        )
    keys = [k for k, _ in index]
    if len(set(keys)) != len(keys) or any(not k or k.startswith("$") for k in keys):
        raise ValueError(f"index keys {keys} must be distinct field names")


def supported_operators(operators: list[str]) -> list[str]:
    """``operators`` if the policy walk can check every one (a spec's or the global allowlist)."""
    unknown = sorted(set(operators) - SUPPORTED_OPERATORS)
    if unknown:
        raise ValueError(
            f"operators {unknown} cannot be allowed: the policy walk can only check "
            f"{', '.join(sorted(SUPPORTED_OPERATORS))}"
        )
    return operators


def spec_problems(exc: ValidationError) -> list[tuple[str, str]]:
    """(key, message) per problem; a value is shown only when short and not a container."""
    out = []
    known = {k for cls in SPEC_KINDS.values() for k in cls.model_fields}
    for err in exc.errors():
        msg = err["msg"].removeprefix("Value error, ")
        key = ".".join(str(p) for p in err["loc"])
        if not key:  # a whole-spec check: its message starts with the key it is about
            first = msg.split(" ", 1)[0]
            key = next((k for k in (first, first + "s") if k in known), "(spec)")
        got = err.get("input")
        shown = "" if isinstance(got, dict | list) or got is None else f" (got {got!r})"
        if err["type"] == "extra_forbidden" and len(err["loc"]) == 1:
            msg, shown = unknown_key(key, known), ""
        out.append((key, f"{msg}{shown}"))
    return out


def tool_set_problem(specs: Iterable[QueryToolSpec], allowed_operators: Collection[str]) -> str | None:
    """What is wrong with this set of query tools, or None: a built-in name, a name used twice,
    or operators outside ``policy.allowed_operators``. Config and the registry both ask this."""
    seen: set[str] = set()
    allowed = set(allowed_operators)
    for spec in specs:
        where = f"query tool {spec.name!r}"
        if spec.name in RESERVED_TOOL_NAMES:
            return f"{where}: the name clashes with the built-in tool {spec.name!r}; choose another name"
        if spec.name in seen:
            return f"{where}: duplicate tool name {spec.name!r} (registered twice)"
        seen.add(spec.name)
        outside = sorted(set(spec.operators) - allowed)
        if outside:
            return (
                f"{where}: operators {outside} are outside policy.allowed_operators "
                f"({', '.join(sorted(allowed)) or 'none'})"
            )
    return None


def check_tool_set(specs: Iterable[QueryToolSpec], allowed_operators: Collection[str]) -> None:
    """Raise ConfigError if ``tool_set_problem`` finds something."""
    problem = tool_set_problem(specs, allowed_operators)
    if problem is not None:
        raise ConfigError(problem)
