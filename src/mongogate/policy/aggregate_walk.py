"""The authoritative pipeline check: an allowlist walk over every stage, at every depth.

Like the filter walk (policy/filters.py), anything it does not positively recognise is refused
with one stable reason code and a path such as ``pipeline[1].$group.total.$sum``. It tracks
which fields exist after each stage (``Shape``), so a later stage can only name what earlier
stages legitimately produced from the spec's projection, and it returns that final shape so
the output can be projected to it. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from mongogate.errors import PolicyViolation
from mongogate.policy.aggregate_exprs import (
    FORBIDDEN_STAGES,
    Field,
    Shape,
    check_group_key,
    check_name,
    field_key,
    field_ref,
    initial_shape,
    reject,
    stage_path,
)
from mongogate.policy.filters import check_bounds, check_filter
from mongogate.policy.paths import seg, show
from mongogate.specs import MEASURE_TYPES, AggregateToolSpec

if TYPE_CHECKING:
    from mongogate.config import PolicySettings

#: stages that replace the documents by groups: `max_groups` applies right after them
GROUP_STAGES = frozenset({"$group", "$sortByCount"})
#: the largest `$skip`/`$limit` and integer `$sum` literal: the embedded engine takes 32-bit
#: values only there, and a bigger `$sum` constant can overflow int64 over a tenant's documents
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class CheckedPipeline:
    """The model's stages, checked and converted, and what the pipeline produces."""

    stages: list[dict[str, Any]]
    #: the fields of the output, outermost first (a key's sub-paths are not repeated)
    output: list[str]
    #: index in ``stages`` of the first stage that produces groups, if any
    first_group: int | None
    #: the type each produced field (dotted for group-key parts) carries, where one is known
    types: dict[str, str] = field(default_factory=dict)


def check_pipeline(pipeline: object, spec: AggregateToolSpec, limits: PolicySettings) -> CheckedPipeline:
    """Check ``pipeline`` against the aggregate spec; raise PolicyViolation naming stage and path."""
    if not isinstance(pipeline, list):
        reject(
            "pipeline_invalid",
            "pipeline",
            f"the pipeline must be an array of stage objects, got {show(pipeline)}",
            'an array such as [{"$group": {"_id": "$status", "n": {"$count": {}}}}]',
        )
    if len(pipeline) > spec.max_stages:
        reject(
            "too_many_stages",
            "pipeline",
            f"the pipeline has {len(pipeline)} stages",
            f"at most {spec.max_stages} stages",
        )
    walk = _PipelineWalk(spec, limits)
    out: list[dict[str, Any]] = []
    first_group: int | None = None
    for i, stage in enumerate(pipeline):
        out.append(walk.stage(i, stage))
        if first_group is None and next(iter(out[-1])) in GROUP_STAGES:
            first_group = i
    types = {k: f.type for k, f in walk.shape.fields.items() if f.type is not None}
    return CheckedPipeline(out, walk.shape.outermost(), first_group, types)


class _PipelineWalk:
    def __init__(self, spec: AggregateToolSpec, limits: PolicySettings) -> None:
        self.spec = spec
        self.limits = limits
        self.shape = initial_shape(spec)
        self.allowed = list(spec.stages)

    def stage(self, i: int, stage: object) -> dict[str, Any]:
        path = f"pipeline[{i}]"
        if not isinstance(stage, dict) or len(stage) != 1:
            reject(
                "stage_invalid",
                path,
                f"each stage must be an object with exactly one $stage key, got {show(stage)}",
                ", ".join(self.allowed),
            )
        name, body = next(iter(stage.items()))
        spath = stage_path(path, name)
        if not isinstance(name, str) or not name.startswith("$"):
            reject("stage_invalid", spath, f"{show(name)} is not a stage name", ", ".join(self.allowed))
        if name in FORBIDDEN_STAGES:
            reject("stage_forbidden", spath, f"{name} {FORBIDDEN_STAGES[name]}", ", ".join(self.allowed))
        if name not in self.allowed:
            reject(
                "stage_not_allowed",
                spath,
                f"stage {seg(name)} is not allowed in this tool",
                ", ".join(self.allowed),
            )
        try:
            check_bounds(body, self.limits)  # the filter bounds, for every stage
        except PolicyViolation as e:
            _rebase(e, spath)
        handler = getattr(self, "s_" + name[1:])
        return {name: handler(body, spath)}

    # -- stages -------------------------------------------------------------------------------

    def s_match(self, body: object, path: str) -> dict[str, Any]:
        if self.shape.grouped:
            fields = {k: f.type for k, f in self.shape.fields.items() if f.type is not None}
            spec = self.spec.model_construct(
                **{**dict(self.spec), "fields": fields, "projection": list(fields) or ["_id"]}
            )
        else:
            spec = self.spec
        try:
            return check_filter(body, spec, self.limits)
        except PolicyViolation as e:
            _rebase(e, path)

    def s_group(self, body: object, path: str) -> dict[str, Any]:
        if not isinstance(body, dict) or "_id" not in body:
            reject(
                "group_invalid",
                path,
                "$group takes an object with an _id (the group key) and named accumulators",
                '{"_id": "$status", "n": {"$count": {}}, "total": {"$sum": "$total"}}',
            )
        key, key_fields = check_group_key(body["_id"], self.shape, self.spec, self.limits, f"{path}._id")
        out: dict[str, Any] = {"_id": key}
        produced: dict[str, Field] = dict(key_fields)
        for name, acc in body.items():
            if name == "_id":
                continue
            npath = check_name(name, self.spec, path)
            value, ftype = self.accumulator(acc, npath)
            out[name] = value
            produced[name] = Field(ftype, group=True, measure=ftype in MEASURE_TYPES)
        self.shape = Shape(produced, grouped=True)
        return out

    def accumulator(self, acc: object, path: str) -> tuple[dict[str, Any], str]:
        allowed = ", ".join(self.spec.accumulators)
        if not isinstance(acc, dict) or len(acc) != 1:
            reject(
                "accumulator_invalid", path, f"an output is one accumulator object, got {show(acc)}", allowed
            )
        op, operand = next(iter(acc.items()))
        opath = stage_path(path, op)
        if op not in self.spec.accumulators:
            reject("accumulator_not_allowed", opath, f"accumulator {show(op)} is not allowed", allowed)
        if op == "$count":
            if operand != {}:
                reject("invalid_operand", opath, '$count takes an empty object: {"$count": {}}', "{}")
            return {op: {}}, "int"
        if op == "$sum" and isinstance(operand, int | float) and not isinstance(operand, bool):
            if isinstance(operand, int) and abs(operand) > _INT32_MAX:
                reject(
                    "out_of_range",
                    opath,
                    f"{show(operand)} is too large to sum",
                    f"-{_INT32_MAX} to {_INT32_MAX}",
                )
            return {op: operand}, "number"
        ref = field_ref(operand, self.shape, self.spec, opath, need="measure")
        ftype = self.shape.fields[ref].type
        if op in ("$sum", "$avg"):
            if ftype not in ("number", "int"):
                reject(
                    "type_mismatch",
                    opath,
                    f"{op} adds numbers; {ref} is {ftype}",
                    "a number or int field (use $min/$max for dates)",
                )
            return {op: "$" + ref}, "number"
        return {op: "$" + ref}, ftype or "number"

    def s_sortByCount(self, body: object, path: str) -> Any:
        if not isinstance(body, str | dict):
            reject("invalid_operand", path, '$sortByCount takes a field path such as "$status"', None)
        key, key_fields = check_group_key(body, self.shape, self.spec, self.limits, path)
        if not (isinstance(key, dict) or (isinstance(key, str) and key.startswith("$"))):
            reject("invalid_operand", path, '$sortByCount takes a field path such as "$status"', None)
        self.shape = Shape({**key_fields, "count": Field("int", group=True, measure=True)}, grouped=True)
        return key

    def s_count(self, body: object, path: str) -> str:
        name = body if isinstance(body, str) else None
        if name is None:
            reject("invalid_operand", path, '$count takes the output field name, e.g. "n"', None)
        check_name(name, self.spec, path, key=False)
        if name == "_id":  # MongoDB refuses it at run time
            reject("output_name_invalid", path, '$count cannot name its output "_id"', None)
        self.shape = Shape({name: Field("int", group=True, measure=True)}, grouped=True)
        return name

    def s_sort(self, body: object, path: str) -> dict[str, int]:
        if not isinstance(body, dict) or not body:
            reject("sort_invalid", path, "$sort takes {field: 1 or -1, ...}", self.shape.names())
        out: dict[str, int] = {}
        for key, direction in body.items():
            kpath = stage_path(path, key)
            field_key(key, self.shape, self.spec, kpath)
            if isinstance(direction, bool) or direction not in (1, -1):
                reject(
                    "sort_invalid", kpath, f"sort direction must be 1 or -1, got {show(direction)}", "1, -1"
                )
            out[key] = direction
        return out

    def s_limit(self, body: object, path: str) -> int:
        return _count_arg(body, path, "$limit", 1)

    def s_skip(self, body: object, path: str) -> int:
        return _count_arg(body, path, "$skip", 0)

    def s_unwind(self, body: object, path: str) -> Any:
        ref_value, opts = body, {}
        if isinstance(body, dict):
            unknown = [k for k in body if k not in ("path", "preserveNullAndEmptyArrays")]
            if unknown or "path" not in body:
                reject(
                    "invalid_operand",
                    stage_path(path, unknown[0]) if unknown else path,
                    "$unwind takes a field path, or {path, preserveNullAndEmptyArrays}",
                    '"$tags" or {"path": "$tags", "preserveNullAndEmptyArrays": true}',
                )
            keep = body.get("preserveNullAndEmptyArrays", False)
            if not isinstance(keep, bool):
                reject("invalid_operand", f"{path}.preserveNullAndEmptyArrays", "takes true or false", None)
            ref_value, opts = body["path"], {"preserveNullAndEmptyArrays": keep}
            path = f"{path}.path"
        ref = field_ref(ref_value, self.shape, self.spec, path, need="any")
        if self.shape.grouped or ref not in self.spec.array_fields:
            reject(
                "unwind_not_array",
                path,
                f"{ref} is not a declared array field",
                ", ".join(self.spec.array_fields) or "no array fields are declared",
            )
        return {"path": "$" + ref, **opts} if opts else "$" + ref

    def s_project(self, body: object, path: str) -> dict[str, int]:
        if not isinstance(body, dict) or not body:
            reject("project_invalid", path, "$project takes {field: 1 or 0, ...}", self.shape.names())
        out: dict[str, int] = {}
        for key, flag in body.items():
            kpath = stage_path(path, key)
            if isinstance(flag, bool) or flag in (0, 1):
                if not (key == "_id" and not flag):  # dropping _id is always fine, even if absent
                    field_key(key, self.shape, self.spec, kpath)
                out[key] = int(flag)
                continue
            reject(
                "project_computed",
                kpath,
                f"$project may only keep (1) or drop (0) existing fields, not compute {show(flag)}",
                "1 or 0",
            )
        modes = {v for k, v in out.items() if k != "_id"}
        if len(modes) > 1:
            reject(
                "project_invalid",
                path,
                "$project cannot mix keeping (1) and dropping (0) fields",
                "all 1 or all 0",
            )
        shape = self.shape.projected(out)
        if not shape.fields:  # nothing left: the final projection would turn into an exclusion
            reject("project_invalid", path, "$project would leave no fields", self.shape.names())
        self.shape = shape
        return out


def _count_arg(body: object, path: str, name: str, least: int) -> int:
    if isinstance(body, bool) or not isinstance(body, int) or not least <= body <= _INT32_MAX:
        reject(
            "invalid_operand",
            path,
            f"{name} takes an integer from {least} to {_INT32_MAX}, got {show(body)}",
            None,
        )
    return body


def _rebase(e: PolicyViolation, path: str) -> NoReturn:
    """A filter-walk refusal, re-rooted from ``filter`` at the stage (``pipeline[0].$match...``)."""
    text = str(e)
    head = f"{e.path}: "
    message = text[len(head) :] if text.startswith(head) else text
    if e.allowed and message.endswith(f"; allowed: {e.allowed}"):
        message = message[: -len(f"; allowed: {e.allowed}")]
    new_path = path + e.path[len("filter") :] if e.path.startswith("filter") else f"{path}.{e.path}"
    reject(e.reason, new_path, message.replace("the filter ", "the stage "), e.allowed)
