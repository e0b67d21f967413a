"""Hostile pipelines: each is refused by the walk alone, with its exact reason and path, and
nothing reaches the database (a CommandListener on the client proves it).

The MCP layer's one audit event per refusal is checked in tests/policy/test_aggregate_mcp.py
over the same table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.monitoring import CommandListener, CommandStartedEvent

from mongogate.config import PolicySettings
from mongogate.demo import ORDER_STATS
from mongogate.errors import PolicyViolation
from mongogate.policy.aggregate_run import run_pipeline
from mongogate.policy.aggregate_walk import check_pipeline

LIMITS = PolicySettings()
G = "$group"
N: dict[str, Any] = {"$count": {}}


def _grp(acc: Any) -> list[dict[str, Any]]:
    return [{G: {"_id": "$status", "x": acc}}]


def _deep(levels: int) -> dict[str, Any]:
    f: dict[str, Any] = {"status": "paid"}
    for _ in range(levels):
        f = {"$or": [f]}
    return f


AFTER = [{G: {"_id": "$status", "n": N}}]  # a first stage after which only _id and n exist
# (id, pipeline, reason, path)
HOSTILE: list[tuple[str, Any, str, str]] = [
    # every forbidden stage
    *[
        (f"stage{stage}", [{stage: {}}], "stage_forbidden", f"pipeline[0].{stage}")
        for stage in (
            "$lookup",
            "$graphLookup",
            "$unionWith",
            "$facet",
            "$out",
            "$merge",
            "$setWindowFields",
            "$documents",
            "$collStats",
            "$indexStats",
            "$currentOp",
            "$listSessions",
            "$planCacheStats",
            "$changeStream",
            "$sample",
            "$replaceRoot",
            "$replaceWith",
            "$addFields",
            "$set",
            "$unset",
            "$geoNear",
            "$search",
            "$vectorSearch",
            "$redact",
        )
    ],
    (
        "lookup-late",
        [{"$match": {}}, {"$lookup": {"from": "users"}}],
        "stage_forbidden",
        "pipeline[1].$lookup",
    ),
    ("unknown-stage", [{"$bucket": {}}], "stage_not_allowed", "pipeline[0].$bucket"),
    ("two-keys", [{"$match": {}, "$limit": 1}], "stage_invalid", "pipeline[0]"),
    ("not-a-stage", [{"match": {}}], "stage_invalid", "pipeline[0].match"),
    ("stage-string", ["$match"], "stage_invalid", "pipeline[0]"),
    ("pipeline-object", {"$match": {}}, "pipeline_invalid", "pipeline"),
    ("disabled-stage", [{"$count": "n"}], "stage_not_allowed", "pipeline[0].$count"),  # spec NO_COUNT
    # forbidden expressions and accumulators
    (
        "acc-function",
        _grp({"$sum": {"$function": {"body": "1"}}}),
        "expression_not_allowed",
        "pipeline[0].$group.x.$sum.$function",
    ),
    (
        "acc-accumulator",
        _grp({"$accumulator": {}}),
        "accumulator_not_allowed",
        "pipeline[0].$group.x.$accumulator",
    ),
    ("acc-push", _grp({"$push": "$total"}), "accumulator_not_allowed", "pipeline[0].$group.x.$push"),
    (
        "acc-addToSet",
        _grp({"$addToSet": "$number"}),
        "accumulator_not_allowed",
        "pipeline[0].$group.x.$addToSet",
    ),
    ("acc-two", _grp({"$sum": 1, "$avg": "$total"}), "accumulator_invalid", "pipeline[0].$group.x"),
    (
        "acc-multiply",
        _grp({"$sum": {"$multiply": ["$total", 2]}}),
        "expression_not_allowed",
        "pipeline[0].$group.x.$sum.$multiply",
    ),
    (
        "acc-literal-obj",
        _grp({"$sum": {"$literal": {"a": 1}}}),
        "expression_not_allowed",
        "pipeline[0].$group.x.$sum.$literal",
    ),
    (
        "acc-let",
        _grp({"$max": {"$let": {"vars": {}, "in": 1}}}),
        "expression_not_allowed",
        "pipeline[0].$group.x.$max.$let",
    ),
    (
        "acc-cond",
        _grp({"$sum": {"$cond": [1, "$total", 0]}}),
        "expression_not_allowed",
        "pipeline[0].$group.x.$sum.$cond",
    ),
    (
        "key-concat",
        [{G: {"_id": {"$concat": ["$status", "x"]}}}],
        "expression_not_allowed",
        "pipeline[0].$group._id.$concat",
    ),
    (
        "key-toString",
        [{G: {"_id": {"k": {"$toString": "$total"}}}}],
        "expression_not_allowed",
        "pipeline[0].$group._id.k.$toString",
    ),
    (
        "key-map",
        [{G: {"_id": {"$map": {"input": "$tags", "in": 1}}}}],
        "expression_not_allowed",
        "pipeline[0].$group._id.$map",
    ),
    (
        "key-filter",
        [{G: {"_id": {"$filter": {"input": "$tags"}}}}],
        "expression_not_allowed",
        "pipeline[0].$group._id.$filter",
    ),
    (
        "key-reduce",
        [{G: {"_id": {"$reduce": {}}}}],
        "expression_not_allowed",
        "pipeline[0].$group._id.$reduce",
    ),
    ("key-array", [{G: {"_id": ["$status"]}}], "group_key_invalid", "pipeline[0].$group._id"),
    (
        "key-nested-obj",
        [{G: {"_id": {"a": {"b": "$status"}}}}],
        "group_key_invalid",
        "pipeline[0].$group._id.a",
    ),
    (
        "match-expr",
        [{"$match": {"$expr": {"$gt": ["$total", 1]}}}],
        "operator_not_allowed",
        "pipeline[0].$match.$expr",
    ),
    (
        "match-where",
        [{"$match": {"$where": "sleep(100)"}}],
        "operator_not_allowed",
        "pipeline[0].$match.$where",
    ),
    (
        "match-late-where",
        [*AFTER, {"$match": {"n": {"$where": "1"}}}],
        "operator_not_allowed",
        "pipeline[1].$match.n.$where",
    ),
    (
        "match-regex",
        [{"$match": {"status": {"$regex": "^p"}}}],
        "operator_not_allowed",
        "pipeline[0].$match.status.$regex",
    ),
    ("match-type", [{"$match": {"total": "cheap"}}], "type_mismatch", "pipeline[0].$match.total"),
    # $dateTrunc beyond its fixed form
    (
        "trunc-unit",
        [{G: {"_id": {"$dateTrunc": {"date": "$createdAt", "unit": "hour"}}}}],
        "date_trunc_invalid",
        "pipeline[0].$group._id.$dateTrunc.unit",
    ),
    (
        "trunc-binsize",
        [{G: {"_id": {"$dateTrunc": {"date": "$createdAt", "unit": "day", "binSize": 7}}}}],
        "date_trunc_invalid",
        "pipeline[0].$group._id.$dateTrunc.binSize",
    ),
    (
        "trunc-tz-expr",
        [{G: {"_id": {"$dateTrunc": {"date": "$createdAt", "unit": "day", "timezone": "$status"}}}}],
        "date_trunc_invalid",
        "pipeline[0].$group._id.$dateTrunc.timezone",
    ),
    (
        "trunc-not-date",
        [{G: {"_id": {"$dateTrunc": {"date": "$status", "unit": "day"}}}}],
        "type_mismatch",
        "pipeline[0].$group._id.$dateTrunc.date",
    ),
    (
        "trunc-now",
        [{G: {"_id": {"$dateTrunc": {"date": "$$NOW", "unit": "day"}}}}],
        "system_variable",
        "pipeline[0].$group._id.$dateTrunc.date",
    ),
    # hidden fields: group key, accumulator input, $project, $sort, $unwind
    ("hidden-key", [{G: {"_id": "$internalNote"}}], "field_not_allowed", "pipeline[0].$group._id"),
    ("hidden-acc", _grp({"$max": "$internalNote"}), "field_not_allowed", "pipeline[0].$group.x.$max"),
    (
        "hidden-project",
        [{"$project": {"internalNote": 1}}],
        "field_not_allowed",
        "pipeline[0].$project.internalNote",
    ),
    ("hidden-sort", [{"$sort": {"internalNote": 1}}], "field_not_allowed", "pipeline[0].$sort.internalNote"),
    (
        "hidden-match",
        [{"$match": {"internalNote": "x"}}],
        "field_not_allowed",
        "pipeline[0].$match.internalNote",
    ),
    ("hidden-id", [{G: {"_id": "$_id"}}], "field_not_allowed", "pipeline[0].$group._id"),
    ("not-groupable", [{G: {"_id": "$number"}}], "field_not_groupable", "pipeline[0].$group._id"),
    ("not-measurable", _grp({"$max": "$status"}), "field_not_measurable", "pipeline[0].$group.x.$max"),
    ("sum-of-dates", _grp({"$sum": "$createdAt"}), "type_mismatch", "pipeline[0].$group.x.$sum"),
    ("unwind-scalar", [{"$unwind": "$status"}], "unwind_not_array", "pipeline[0].$unwind"),
    ("unwind-hidden", [{"$unwind": "$internalNote"}], "field_not_allowed", "pipeline[0].$unwind"),
    (
        "unwind-index",
        [{"$unwind": {"path": "$tags", "includeArrayIndex": "i"}}],
        "invalid_operand",
        "pipeline[0].$unwind.includeArrayIndex",
    ),
    (
        "project-computed",
        [{"$project": {"t": {"$add": ["$total", 1]}}}],
        "project_computed",
        "pipeline[0].$project.t",
    ),
    ("project-rename", [{"$project": {"s": "$status"}}], "project_computed", "pipeline[0].$project.s"),
    ("project-mixed", [{"$project": {"total": 1, "status": 0}}], "project_invalid", "pipeline[0].$project"),
    # dotted paths into a field, system variables
    ("dotted-key", [{G: {"_id": "$status.x"}}], "dotted_path", "pipeline[0].$group._id"),
    ("dotted-acc", _grp({"$sum": "$total.cents"}), "dotted_path", "pipeline[0].$group.x.$sum"),
    ("dotted-sort", [{"$sort": {"total.x": 1}}], "dotted_path", 'pipeline[0].$sort["total.x"]'),
    ("root", [{G: {"_id": "$$ROOT"}}], "system_variable", "pipeline[0].$group._id"),
    ("current", _grp({"$first": "$$CURRENT"}), "system_variable", "pipeline[0].$group.x.$first"),
    (
        "current-path",
        _grp({"$first": "$$CURRENT.internalNote"}),
        "system_variable",
        "pipeline[0].$group.x.$first",
    ),
    ("now", [{G: {"_id": {"d": "$$NOW"}}}], "system_variable", "pipeline[0].$group._id.d"),
    ("user-roles", [{G: {"_id": "$$USER_ROLES"}}], "system_variable", "pipeline[0].$group._id"),
    ("unwind-root", [{"$unwind": "$$ROOT"}], "system_variable", "pipeline[0].$unwind"),
    # the tenant field anywhere, and a second tenant $match
    (
        "tenant-match",
        [{"$match": {"userId": "globex"}}],
        "tenant_field_forbidden",
        "pipeline[0].$match.userId",
    ),
    (
        "tenant-match-or",
        [{"$match": {"$or": [{"status": "paid"}, {"userId": "globex"}]}}],
        "tenant_field_forbidden",
        "pipeline[0].$match.$or[1].userId",
    ),
    ("tenant-key", [{G: {"_id": "$userId"}}], "tenant_field_forbidden", "pipeline[0].$group._id"),
    ("tenant-acc", _grp({"$first": "$userId"}), "tenant_field_forbidden", "pipeline[0].$group.x.$first"),
    (
        "tenant-output",
        [{G: {"_id": "$status", "userId": N}}],
        "tenant_field_forbidden",
        "pipeline[0].$group.userId",
    ),
    (
        "tenant-project",
        [{"$project": {"userId": 1}}],
        "tenant_field_forbidden",
        "pipeline[0].$project.userId",
    ),
    ("tenant-sort", [{"$sort": {"userId": 1}}], "tenant_field_forbidden", "pipeline[0].$sort.userId"),
    ("tenant-count", [{"$count": "userId"}], "tenant_field_forbidden", "pipeline[0].$count"),
    (
        "tenant-after-group",
        [*AFTER, {"$match": {"userId": "globex"}}],
        "tenant_field_forbidden",
        "pipeline[1].$match.userId",
    ),
    # after $group only the group's outputs exist
    (
        "gone-after-group",
        [*AFTER, {"$match": {"total": {"$gt": 1}}}],
        "field_not_allowed",
        "pipeline[1].$match.total",
    ),
    ("gone-sort", [*AFTER, {"$sort": {"total": 1}}], "field_not_allowed", "pipeline[1].$sort.total"),
    ("gone-regroup", [*AFTER, {G: {"_id": "$status"}}], "field_not_allowed", "pipeline[1].$group._id"),
    ("gone-unwind", [*AFTER, {"$unwind": "$tags"}], "field_not_allowed", "pipeline[1].$unwind"),
    ("output-dollar", [{G: {"_id": "$status", "$x": N}}], "output_name_invalid", "pipeline[0].$group.$x"),
    (
        "output-dotted",
        [{G: {"_id": "$status", "a.b": N}}],
        "output_name_invalid",
        'pipeline[0].$group["a.b"]',
    ),
    # size: stages, node/depth bounds per stage, group bombs
    ("too-many-stages", [{"$match": {}}] * 9, "too_many_stages", "pipeline"),
    ("deep-match", [{"$match": _deep(6)}], "too_deep", "pipeline[0].$match" + ".$or[0]" * 6),
    (
        "group-bomb-accs",
        [{G: {"_id": "$status", **{f"a{i}": N for i in range(120)}}}],
        "too_many_nodes",
        "pipeline[0].$group.a99",
    ),
    (
        "group-bomb-keys",
        [{G: {"_id": {f"k{i}": "$status" for i in range(250)}}}],
        "too_many_nodes",
        "pipeline[0].$group._id.k198",
    ),
    ("sortByCount-literal", [{"$sortByCount": "status"}], "invalid_operand", "pipeline[0].$sortByCount"),
    ("project-id", [{"$project": {"_id": 1}}], "field_not_allowed", "pipeline[0].$project._id"),
    ("limit-zero", [{"$limit": 0}], "invalid_operand", "pipeline[0].$limit"),
    ("skip-negative", [{"$skip": -1}], "invalid_operand", "pipeline[0].$skip"),
]

NO_COUNT = ORDER_STATS.model_copy(update={"stages": [s for s in ORDER_STATS.stages if s != "$count"]})


def spec_for(case_id: str) -> Any:
    return NO_COUNT if case_id == "disabled-stage" else ORDER_STATS


def test_table_is_big_enough() -> None:
    assert len(HOSTILE) >= 60
    assert len({c[0] for c in HOSTILE}) == len(HOSTILE)


@pytest.mark.parametrize(("case_id", "pipeline", "reason", "path"), HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_pipeline_is_rejected(case_id: str, pipeline: Any, reason: str, path: str) -> None:
    with pytest.raises(PolicyViolation) as info:
        check_pipeline(pipeline, spec_for(case_id), LIMITS)
    assert (info.value.reason, info.value.path) == (reason, path), str(info.value)
    assert str(info.value).startswith(f"{path}: ")


class Commands(CommandListener):
    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: CommandStartedEvent) -> None:
        if event.command_name not in ("hello", "isMaster", "ismaster", "ping", "endSessions"):
            self.names.append(event.command_name)

    def succeeded(self, event: Any) -> None:
        pass

    def failed(self, event: Any) -> None:
        pass


@pytest.fixture
async def listened(engine_uri: str, db_name: str) -> AsyncIterator[tuple[Any, Commands]]:
    commands = Commands()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(engine_uri, event_listeners=[commands])
    try:
        await client.admin.command("ping")  # connected, so only the tool's own commands are left
        yield client[db_name]["orders"], commands
    finally:
        await client.close()


@pytest.mark.anyio
async def test_no_command_reaches_the_database_for_a_rejected_pipeline(
    listened: tuple[Any, Commands],
) -> None:
    coll, commands = listened
    for case_id, pipeline, reason, path in HOSTILE:
        with pytest.raises(PolicyViolation) as info:
            await run_pipeline(coll, spec_for(case_id), {"pipeline": pipeline}, "acme", LIMITS)
        assert (info.value.reason, info.value.path) == (reason, path), case_id
    assert commands.names == []
    unhinted = ORDER_STATS.model_copy(update={"index": None})  # this collection has no index
    await run_pipeline(coll, unhinted, {"pipeline": [{"$count": "n"}]}, "acme", LIMITS)
    assert commands.names == ["aggregate"]  # the listener does see a pipeline that passes
