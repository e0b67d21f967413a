"""Run one checked pipeline: tenant `$match` first, the spec's hint, bounded time, no disk, a
`$limit` of limit + 1, and the output projected to what the pipeline legitimately produced.

Plain async pymongo, no MCP; the collection comes from the read-only query client and this
module only ever calls ``aggregate`` on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.policy.aggregate_walk import GROUP_STAGES, CheckedPipeline, check_pipeline
from mongogate.policy.execute import QueryResult
from mongogate.policy.filters import check_limit
from mongogate.policy.render import cap_documents, count_marks, to_json, type_check
from mongogate.policy.scope import AGGREGATE, QueryScope, check_argument_names
from mongogate.specs import AggregateToolSpec

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

    from mongogate.config import PolicySettings

ARGUMENTS = ("pipeline", "limit")
#: stages that neither add nor drop documents
_KEEP_COUNT = frozenset({"$sort", "$project"})


@dataclass(frozen=True)
class PreparedPipeline:
    """Everything ``aggregate`` receives, decided before any I/O (also used by the benchmark)."""

    pipeline: list[dict[str, Any]]
    #: the query that tells whether the first group stage made more than ``max_groups`` groups
    probe: list[dict[str, Any]] | None
    output: list[str]
    limit: int
    #: the caller's scope: the hint, the time budget, the errors
    scope: QueryScope
    #: the pipeline makes groups (so ``max_groups`` applies)
    grouped: bool = False
    #: the type each output field carries (from the spec, or the accumulator that made it)
    types: dict[str, str] = field(default_factory=dict)


def output_projection(output: list[str]) -> dict[str, int]:
    if not output:  # never an exclusion (`{_id: 0}` alone would keep every hidden field)
        raise ValueError("a pipeline's output cannot be empty")
    proj = {name: 1 for name in output}
    if "_id" not in proj and not any(name.startswith("_id.") for name in output):
        proj["_id"] = 0
    return proj


def scoped_pipeline(
    checked: CheckedPipeline, spec: AggregateToolSpec, tenant: str, limit: int
) -> PreparedPipeline:
    """``[tenant $match] + checked (a $limit of max_groups + 1 after each group stage)
    + [$project to the output, $limit limit + 1]``."""
    scope = QueryScope.of(spec, tenant)
    head = scope.head()
    body: list[dict[str, Any]] = []
    probe: list[dict[str, Any]] | None = None
    first = checked.first_group
    # Only $sort/$project after the first group: the answer itself counts the groups, no probe.
    counted = first is not None and all(next(iter(s)) in _KEEP_COUNT for s in checked.stages[first + 1 :])
    for i, stage in enumerate(checked.stages):
        body.append(stage)
        if next(iter(stage)) in GROUP_STAGES:
            if i == first and not counted:
                over: list[dict[str, Any]] = [{"$skip": spec.max_groups}, {"$limit": 1}, {"$count": "over"}]
                probe = [head, *body]
                probe.extend(over)
            body.append({"$limit": spec.max_groups + 1})
    tail: list[dict[str, Any]] = [{"$project": output_projection(checked.output)}, {"$limit": limit + 1}]
    return PreparedPipeline(
        [head, *body, *tail], probe, checked.output, limit, scope, first is not None, dict(checked.types)
    )


def prepare_pipeline(
    spec: AggregateToolSpec, args: dict[str, Any], tenant: str, limits: PolicySettings
) -> PreparedPipeline:
    """Check every argument (the authority, whatever schema validation ran before)."""
    check_argument_names(args, ARGUMENTS)
    checked = check_pipeline(args.get("pipeline", []), spec, limits)
    limit, _lowered = check_limit(args.get("limit"), spec)
    return scoped_pipeline(checked, spec, tenant, limit)


async def _aggregate(
    collection: AsyncCollection[Any],
    scope: QueryScope,
    pipeline: list[dict[str, Any]],
    max_time_ms: int | None = None,
) -> list[dict[str, Any]]:
    with scope.errors(AGGREGATE):
        cursor = await collection.aggregate(pipeline, **scope.options(max_time_ms, allowDiskUse=False))
        try:
            return await cursor.to_list(None)
        finally:
            await cursor.close()


def render_output(
    doc: dict[str, Any], output: list[str], types: dict[str, str] | None = None, bad: list[str] | None = None
) -> dict[str, Any]:
    """Only the produced fields, whatever the server returned (a second projection, in Python).

    A value whose type is known (``types``) and does not match is returned as null, its path
    added to ``bad``: a drifted document (``"high"`` in an int field read by ``$max``) never
    reaches the model as if it were the declared type."""
    if types:
        doc = _null_drift(doc, types, bad)
    out: dict[str, Any] = {}
    for name in output:
        top, _, rest = name.partition(".")
        if not rest:
            if top in doc:
                out[top] = to_json(doc[top])
            continue
        value: Any = doc
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None or (isinstance(doc.get(top), dict) and rest in doc[top]):
            out.setdefault(top, {})[rest] = to_json(value)
    return out


def _null_drift(doc: dict[str, Any], types: dict[str, str], bad: list[str] | None) -> dict[str, Any]:
    """A copy of ``doc`` (only as deep as needed) with mismatched typed values set to None."""
    copied: dict[str, Any] | None = None
    for path, ftype in types.items():
        top, _, rest = path.partition(".")
        holder: Any = doc.get(top) if rest else doc
        key = rest if rest else top
        if "." in key or not isinstance(holder, dict) or key not in holder:
            continue
        if type_check(ftype)(holder[key]):
            continue
        if copied is None:
            copied = dict(doc)
        if rest:
            copied[top] = {**copied[top], key: None}
        else:
            copied[top] = None
        if bad is not None:
            bad.append(path)
    return doc if copied is None else copied


async def run_pipeline(
    collection: AsyncCollection[Any],
    spec: AggregateToolSpec,
    args: dict[str, Any],
    tenant: str,
    limits: PolicySettings,
    clock: Clock = SYSTEM_CLOCK,
) -> QueryResult:
    """Check, scope to ``tenant``, aggregate (limit + 1 to learn ``truncated``), render, cap bytes.

    More than ``max_groups`` groups is not an error: the answer is ``truncated``. The whole call
    stays within ``max_time_ms``: the group-count probe gets what the answer left of it."""
    q = prepare_pipeline(spec, args, tenant, limits)
    scope = q.scope
    started = clock.now()
    raw = await _aggregate(collection, scope, q.pipeline)
    more = len(raw) > q.limit or (q.grouped and len(raw) > spec.max_groups)
    if not more and q.probe is not None:
        left = spec.max_time_ms - int((clock.now() - started).total_seconds() * 1000)
        if left <= 0:
            raise scope.over_budget(AGGREGATE)
        # {"over": 1} when a group past max_groups exists (an engine may also say {"over": 0})
        more = any(doc.get("over") for doc in await _aggregate(collection, scope, q.probe, left))
    # the row past max_groups only tells that there are more: it is never returned
    keep = min(q.limit, spec.max_groups) if q.grouped else q.limit
    marks: list[list[str]] = [[] for _ in raw[:keep]]
    docs = [render_output(doc, q.output, q.types, bad) for doc, bad in zip(raw[:keep], marks, strict=True)]
    docs, cut = cap_documents(docs, limits.max_response_bytes)
    return QueryResult(
        documents=docs,
        returned=len(docs),
        limit=q.limit,
        truncated=more or cut,
        type_mismatches=count_marks(marks[: len(docs)]),
    )
