"""The caller's slice of one tool's collection: what the find and the aggregate runner share.

One object owns what every query of a tool gets whatever the model wrote: the authenticated
tenant (the rule that the model never names it is ``specs.names_tenant``), the spec's fixed
projection, the declared index as a ``hint`` (one shape: a key pattern), the time budget, and
how a timeout or a driver error becomes the one error the model reads. The argument preamble
of both runners (an object, only the tool's own argument names) is here too. No MCP, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pymongo.errors import ExecutionTimeout, OperationFailure, PyMongoError

from mongogate.errors import AuthError, PolicyViolation, StorageError
from mongogate.policy.paths import key_path, seg
from mongogate.specs import AggregateToolSpec, QueryToolSpec


class PipelineRefused(StorageError):
    """The database refused a checked pipeline (a memory limit, an option the engine lacks):
    the same pipeline fails the same way again, so the model is told to change it, not retry."""

    retryable = False


@dataclass(frozen=True)
class Step:
    """One kind of database call of a tool, as its errors name it."""

    #: what ran out of time: "{tool}" or "counting for {tool}"
    subject: str
    #: after the tool's name when the call failed
    failed: str
    #: what to change after a timeout
    advice: str
    #: (after the tool's name, advice) when an answer from the database refuses the call for good;
    #: None: such an answer is a failure like a lost connection
    refused: tuple[str, str] | None = None


FIND = Step(
    "{tool}",
    "failed in the database",
    "narrow the filter (for example a shorter date range or fewer $in values) and retry",
)
COUNT = Step(
    "counting for {tool}",
    "failed to count in the database",
    "narrow the filter and retry, or retry without count",
)
AGGREGATE = Step(
    "{tool}",
    "failed in the database",
    "add a $match first (for example a shorter date range) and retry",
    refused=(
        ": the database refused this pipeline",
        "retrying it will not help; change it (for example a $match first, fewer groups, "
        "or no $dateTrunc timezone)",
    ),
)


def check_argument_names(args: object, names: tuple[str, ...]) -> dict[str, Any]:
    """``args`` if it is an object holding only the tool's argument ``names`` (both runners)."""
    if not isinstance(args, dict):
        raise PolicyViolation("schema_invalid", "arguments", "arguments must be an object", ", ".join(names))
    for key in args:
        if key not in names:
            raise PolicyViolation(
                "unknown_argument", key_path("", key), f"unknown argument {seg(key)}", ", ".join(names)
            )
    return args


def projection_of(spec: QueryToolSpec) -> dict[str, int]:
    """The spec's fixed projection; ``_id`` is excluded unless listed."""
    proj = {field: 1 for field in spec.projection}
    if "_id" not in proj:
        proj["_id"] = 0
    return proj


def hint_of(spec: QueryToolSpec) -> dict[str, int] | None:
    """The declared index as a key pattern: every query is bounded by the caller's own data."""
    return {k: d for k, d in spec.index} if spec.index else None


#: per spec (by identity; the spec is held, so its id is not reused): its projection and hint,
#: worked out once, not on every call. Shared values: nothing mutates them.
_FIXED: dict[int, tuple[QueryToolSpec, dict[str, int], dict[str, int] | None]] = {}
_FIXED_MAX = 1024


def _fixed(spec: QueryToolSpec) -> tuple[QueryToolSpec, dict[str, int], dict[str, int] | None]:
    hit = _FIXED.get(id(spec))
    if hit is None or hit[0] is not spec:
        if len(_FIXED) >= _FIXED_MAX:
            _FIXED.clear()
        hit = _FIXED[id(spec)] = (spec, projection_of(spec), hint_of(spec))
    return hit


class QueryScope:
    """One authenticated caller's view of one tool: built only with a tenant (``QueryScope.of``).

    A plain slotted class rather than a frozen dataclass: one is built per call, on the hot path;
    nothing sets its attributes after ``__init__``."""

    __slots__ = ("hint", "projection", "spec", "tenant")

    def __init__(self, spec: QueryToolSpec, tenant: str) -> None:
        self.spec = spec
        self.tenant = tenant
        _, proj, hint = _fixed(spec)
        #: the spec's fixed projection (``_id`` excluded unless listed)
        self.projection: dict[str, int] = proj
        #: the declared index as a key pattern, or None
        self.hint: dict[str, int] | None = hint

    @classmethod
    def of(cls, spec: QueryToolSpec, tenant: object) -> QueryScope:
        """The scope of an authenticated caller; without a tenant nothing runs."""
        if not isinstance(tenant, str) or not tenant:
            what = "pipeline" if isinstance(spec, AggregateToolSpec) else "query"
            raise AuthError(f"no authenticated tenant: the {what} was not run")
        return cls(spec, tenant)

    @property
    def tool(self) -> str:
        """The tool as errors name it."""
        kind = "aggregation tool" if isinstance(self.spec, AggregateToolSpec) else "query tool"
        return f"{kind} {self.spec.name!r}"

    def filter(self, checked: dict[str, Any]) -> dict[str, Any]:
        """The executed filter: the model's (checked) filter AND the tenant; it can only narrow."""
        return {"$and": [checked, {self.spec.tenant_field: self.tenant}]}

    def head(self) -> dict[str, Any]:
        """A pipeline's first stage: the tenant ``$match``, before anything the model wrote."""
        return {"$match": {"$and": [{self.spec.tenant_field: self.tenant}]}}

    def options(self, max_time_ms: int | None = None, **extra: Any) -> dict[str, Any]:
        """Driver options: the time budget (or what is left of it) and the hint when declared."""
        out: dict[str, Any] = {"maxTimeMS": self.spec.max_time_ms if max_time_ms is None else max_time_ms}
        out.update(extra)
        if self.hint is not None:
            out["hint"] = self.hint
        return out

    def over_budget(self, step: Step) -> StorageError:
        subject = step.subject.format(tool=self.tool)
        return StorageError(
            f"{subject} exceeded its time budget of {self.spec.max_time_ms} ms", advice=step.advice
        )

    @contextmanager
    def errors(self, step: Step) -> Iterator[None]:
        """Driver errors inside become the model's error (the driver detail stays the cause)."""
        try:
            yield
        except ExecutionTimeout as e:
            raise self.over_budget(step) from e
        except OperationFailure as e:  # an answer from the database, not a lost connection
            if step.refused is None:
                raise StorageError(f"{self.tool} {step.failed}") from e
            message, advice = step.refused
            raise PipelineRefused(f"{self.tool}{message}", advice=advice) from e
        except PyMongoError as e:
            raise StorageError(f"{self.tool} {step.failed}") from e
