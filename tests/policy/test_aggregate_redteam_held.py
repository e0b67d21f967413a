"""Red-team attacks on the aggregation walk that held: each is refused with this reason and path.

Kept as regressions where they add coverage beyond tests/policy/test_aggregate_hostile.py
(key parts, look-alike and long names, $sortByCount/$unwind/$count/$project/$sort edge cases,
accumulator operands, $dateTrunc options, matches after a group). The defects found by the same
red team are in tests/policy/test_aggregate_redteam.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from mongogate.config import PolicySettings
from mongogate.demo import ORDER_STATS
from mongogate.errors import PolicyViolation
from mongogate.policy.aggregate_walk import check_pipeline

LIMITS = PolicySettings()
G = "$group"
N: dict[str, Any] = {"$count": {}}
Doc = dict[str, Any]

# -- attacks that held: (id, pipeline, reason, path) --------------------------------------------
_AFTER: list[Doc] = [{G: {"_id": {"k": "$status"}, "n": N}}]
HELD: list[tuple[str, Any, str, str]] = [
    (
        "key-part-tenant",
        [{"$group": {"_id": {"userId": "$status"}}}],
        "tenant_field_forbidden",
        "pipeline[0].$group._id.userId",
    ),
    (
        "key-part-empty",
        [{"$group": {"_id": {"": "$status"}}}],
        "output_name_invalid",
        'pipeline[0].$group._id[""]',
    ),
    (
        "key-mixed-dollar",
        [{"$group": {"_id": {"a": "$status", "$dateTrunc": {"date": "$createdAt", "unit": "day"}}}}],
        "expression_not_allowed",
        "pipeline[0].$group._id.$dateTrunc",
    ),
    (
        "key-tenant-dotted",
        [{"$group": {"_id": "$userId.x"}}],
        "tenant_field_forbidden",
        "pipeline[0].$group._id",
    ),
    ("key-lookalike", [{"$group": {"_id": "$userΙd"}}], "field_not_allowed", "pipeline[0].$group._id"),
    (
        "key-hidden-dotted",
        [{"$group": {"_id": "$internalNote.x"}}],
        "field_not_allowed",
        "pipeline[0].$group._id",
    ),
    (
        "key-long-name",
        [{"$group": {"_id": "$" + "a" * 5000}}],
        "field_not_allowed",
        "pipeline[0].$group._id",
    ),
    ("key-empty-path", [{"$group": {"_id": "$"}}], "invalid_field_name", "pipeline[0].$group._id"),
    ("key-nul", [{"$group": {"_id": "$status\x00"}}], "invalid_field_name", "pipeline[0].$group._id"),
    ("sbc-tenant", [{"$sortByCount": "$userId"}], "tenant_field_forbidden", "pipeline[0].$sortByCount"),
    ("sbc-hidden", [{"$sortByCount": "$internalNote"}], "field_not_allowed", "pipeline[0].$sortByCount"),
    (
        "sbc-literal-op",
        [{"$sortByCount": {"$literal": "x"}}],
        "expression_not_allowed",
        "pipeline[0].$sortByCount.$literal",
    ),
    ("sbc-number", [{"$sortByCount": 5}], "invalid_operand", "pipeline[0].$sortByCount"),
    ("sbc-root", [{"$sortByCount": "$$ROOT"}], "system_variable", "pipeline[0].$sortByCount"),
    ("unwind-tenant", [{"$unwind": "$userId"}], "tenant_field_forbidden", "pipeline[0].$unwind"),
    (
        "unwind-keep-str",
        [{"$unwind": {"path": "$tags", "preserveNullAndEmptyArrays": "yes"}}],
        "invalid_operand",
        "pipeline[0].$unwind.preserveNullAndEmptyArrays",
    ),
    (
        "unwind-after-count",
        [{"$count": "n"}, {"$unwind": "$tags"}],
        "field_not_allowed",
        "pipeline[1].$unwind",
    ),
    (
        "unwind-dropped",
        [{"$project": {"tags": 0}}, {"$unwind": "$tags"}],
        "field_not_allowed",
        "pipeline[1].$unwind",
    ),
    ("count-dotted", [{"$count": "a.b"}], "output_name_invalid", "pipeline[0].$count"),
    ("count-dollar", [{"$count": "$n"}], "output_name_invalid", "pipeline[0].$count"),
    (
        "count-long",
        [{"$count": "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"}],
        "output_name_invalid",
        "pipeline[0].$count",
    ),
    ("count-object", [{"$count": {}}], "invalid_operand", "pipeline[0].$count"),
    ("project-empty-key", [{"$project": {"": 1}}], "invalid_field_name", 'pipeline[0].$project[""]'),
    (
        "project-dollar-key",
        [{"$project": {"$status": 1}}],
        "invalid_field_name",
        "pipeline[0].$project.$status",
    ),
    (
        "project-tenant-drop",
        [{"$project": {"userId": 0}}],
        "tenant_field_forbidden",
        "pipeline[0].$project.userId",
    ),
    (
        "project-hidden-drop",
        [{"$project": {"internalNote": 0}}],
        "field_not_allowed",
        "pipeline[0].$project.internalNote",
    ),
    (
        "project-dotted-positional",
        [{"$project": {"tags.$": 1}}],
        "dotted_path",
        'pipeline[0].$project["tags.$"]',
    ),
    (
        "project-literal-obj",
        [{"$project": {"status": {"$literal": 1}}}],
        "project_computed",
        "pipeline[0].$project.status",
    ),
    (
        "project-nan",
        [{"$project": {"status": float("nan")}}],
        "project_computed",
        "pipeline[0].$project.status",
    ),
    ("sort-meta-key", [{"$sort": {"$meta": 1}}], "invalid_field_name", "pipeline[0].$sort.$meta"),
    (
        "sort-meta-value",
        [{"$sort": {"total": {"$meta": "textScore"}}}],
        "sort_invalid",
        "pipeline[0].$sort.total",
    ),
    ("sort-bool", [{"$sort": {"total": True}}], "sort_invalid", "pipeline[0].$sort.total"),
    (
        "sort-after-count-gone",
        [{"$count": "n"}, {"$sort": {"total": 1}}],
        "field_not_allowed",
        "pipeline[1].$sort.total",
    ),
    ("limit-bool", [{"$limit": True}], "invalid_operand", "pipeline[0].$limit"),
    ("limit-float", [{"$limit": 1.5}], "invalid_operand", "pipeline[0].$limit"),
    ("skip-float", [{"$skip": 1000.0}], "invalid_operand", "pipeline[0].$skip"),
    ("limit-string", [{"$limit": "5"}], "invalid_operand", "pipeline[0].$limit"),
    (
        "acc-bool",
        [{"$group": {"_id": None, "s": {"$sum": True}}}],
        "field_path_invalid",
        "pipeline[0].$group.s.$sum",
    ),
    (
        "acc-array",
        [{"$group": {"_id": None, "s": {"$min": ["$total"]}}}],
        "field_path_invalid",
        "pipeline[0].$group.s.$min",
    ),
    (
        "acc-avg-date",
        [{"$group": {"_id": None, "s": {"$avg": "$createdAt"}}}],
        "type_mismatch",
        "pipeline[0].$group.s.$avg",
    ),
    (
        "acc-root-path",
        [{"$group": {"_id": None, "s": {"$first": "$$ROOT.internalNote"}}}],
        "system_variable",
        "pipeline[0].$group.s.$first",
    ),
    (
        "acc-top",
        [{"$group": {"_id": None, "s": {"$top": {"output": "$internalNote", "sortBy": {"total": 1}}}}}],
        "accumulator_not_allowed",
        "pipeline[0].$group.s.$top",
    ),
    (
        "acc-count-arg",
        [{"$group": {"_id": None, "s": {"$count": {"x": 1}}}}],
        "invalid_operand",
        "pipeline[0].$group.s.$count",
    ),
    (
        "acc-tenant-dotted",
        [{"$group": {"_id": None, "s": {"$max": "$userId.x"}}}],
        "tenant_field_forbidden",
        "pipeline[0].$group.s.$max",
    ),
    (
        "acc-key-not-measure",
        [{"$group": {"_id": None, "s": {"$max": "$tags"}}}],
        "field_not_measurable",
        "pipeline[0].$group.s.$max",
    ),
    ("group-no-id", [{"$group": {"n": {"$count": {}}}}], "group_invalid", "pipeline[0].$group"),
    ("group-list", [{"$group": [{"_id": None}]}], "group_invalid", "pipeline[0].$group"),
    (
        "group-out-lookalike-tenant-ok-but-dollar",
        [{"$group": {"_id": None, "$where": {"$count": {}}}}],
        "output_name_invalid",
        "pipeline[0].$group.$where",
    ),
    (
        "trunc-unit-list",
        [{"$group": {"_id": {"$dateTrunc": {"date": "$createdAt", "unit": ["day"]}}}}],
        "date_trunc_invalid",
        "pipeline[0].$group._id.$dateTrunc.unit",
    ),
    (
        "trunc-tz-long",
        [
            {
                "$group": {
                    "_id": {
                        "$dateTrunc": {
                            "date": "$createdAt",
                            "unit": "day",
                            "timezone": "A/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
                        }
                    }
                }
            }
        ],
        "date_trunc_invalid",
        "pipeline[0].$group._id.$dateTrunc.timezone",
    ),
    (
        "trunc-tz-olson-expr",
        [
            {
                "$group": {
                    "_id": {
                        "$dateTrunc": {
                            "date": "$createdAt",
                            "unit": "day",
                            "timezone": {"$concat": ["U", "TC"]},
                        }
                    }
                }
            }
        ],
        "date_trunc_invalid",
        "pipeline[0].$group._id.$dateTrunc.timezone",
    ),
    (
        "trunc-hidden",
        [{"$group": {"_id": {"$dateTrunc": {"date": "$internalNote", "unit": "day"}}}}],
        "field_not_allowed",
        "pipeline[0].$group._id.$dateTrunc.date",
    ),
    (
        "trunc-startofweek",
        [{"$group": {"_id": {"$dateTrunc": {"date": "$createdAt", "unit": "week", "startOfWeek": "mon"}}}}],
        "date_trunc_invalid",
        "pipeline[0].$group._id.$dateTrunc.startOfWeek",
    ),
    ("stage-lookalike", [{"$\uff4cookup": {}}], "stage_not_allowed", "pipeline[0].$\uff4cookup"),
    ("stage-upper", [{"$LOOKUP": {}}], "stage_not_allowed", "pipeline[0].$LOOKUP"),
    ("stage-no-dollar-lookup", [{"lookup": {}}], "stage_invalid", "pipeline[0].lookup"),
    ("stage-bucketAuto", [{"$bucketAuto": {}}], "stage_not_allowed", "pipeline[0].$bucketAuto"),
    (
        "stage-listSearchIndexes",
        [{"$listSearchIndexes": {}}],
        "stage_not_allowed",
        "pipeline[0].$listSearchIndexes",
    ),
    (
        "match-text",
        [{"$match": {"$text": {"$search": "x"}}}],
        "operator_not_allowed",
        "pipeline[0].$match.$text",
    ),
    (
        "match-jsonschema",
        [{"$match": {"$jsonSchema": {}}}],
        "operator_not_allowed",
        "pipeline[0].$match.$jsonSchema",
    ),
    (
        "match-function-value",
        [{"$match": {"status": {"$function": {}}}}],
        "operator_not_allowed",
        "pipeline[0].$match.status.$function",
    ),
    (
        "match-dotted-hidden",
        [{"$match": {"internalNote.x": 1}}],
        "field_not_allowed",
        'pipeline[0].$match["internalNote.x"]',
    ),
    (
        "match-after-group-hidden-parent",
        [*_AFTER, {"$match": {"_id.userId": "globex"}}],
        "field_not_allowed",
        'pipeline[1].$match["_id.userId"]',
    ),
    (
        "match-after-group-id-obj",
        [*_AFTER, {"$match": {"_id": {"k": "paid"}}}],
        "field_not_allowed",
        "pipeline[1].$match._id",
    ),
    (
        "project-after-drop-id",
        [*_AFTER, {"$project": {"_id": 0}}, {"$group": {"_id": "$_id.k"}}],
        "field_not_allowed",
        "pipeline[2].$group._id",
    ),
    (
        "sum-dollar-dollar",
        [{"$group": {"_id": None, "s": {"$sum": "$$NOW"}}}],
        "system_variable",
        "pipeline[0].$group.s.$sum",
    ),
    ("pipeline-null", None, "pipeline_invalid", "pipeline"),
    ("stage-null", [None], "stage_invalid", "pipeline[0]"),
    ("stage-empty", [{}], "stage_invalid", "pipeline[0]"),
]


@pytest.mark.parametrize(("case_id", "pipeline", "reason", "path"), HELD, ids=[c[0] for c in HELD])
def test_attack_is_refused(case_id: str, pipeline: Any, reason: str, path: str) -> None:
    with pytest.raises(PolicyViolation) as info:
        check_pipeline(pipeline, ORDER_STATS, LIMITS)
    assert (info.value.reason, info.value.path) == (reason, path), case_id
