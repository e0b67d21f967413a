"""JSON Schemas of an aggregation tool: what the model reads, never what decides.

The pipeline walk (policy/aggregate_walk.py) alone accepts or refuses a call; this schema
lists the stages, fields and accumulators so that the model writes a pipeline that passes.
"""

from __future__ import annotations

from typing import Any

from mongogate.policy.aggregate_exprs import DATE_UNITS
from mongogate.policy.schema import DIALECT, result_schema
from mongogate.specs import AggregateToolSpec


def pipeline_guide(spec: AggregateToolSpec) -> str:
    """One paragraph the model reads: what each part of a pipeline may name."""
    dates = [f for f in spec.groupable if spec.fields.get(f) == "date"]
    parts = [
        f"Stages: {', '.join(spec.stages)} (at most {spec.max_stages}).",
        f"Group keys: {', '.join('$' + f for f in spec.groupable) or 'none'}"
        + (
            f', or {{"$dateTrunc": {{"date": "${dates[0]}", "unit": one of {", ".join(DATE_UNITS)}}}}}'
            if dates
            else ""
        )
        + ".",
        f"Accumulators: {', '.join(spec.accumulators)} over "
        f"{', '.join('$' + f for f in spec.measurable) or 'no fields'}"
        " ($sum also takes a number; $count takes {}).",
        "After $group, later stages name only the group's outputs (_id and the accumulator names).",
        "$project only keeps (1) or drops (0) fields.",
    ]
    if spec.array_fields:
        parts.append(f"$unwind: {', '.join('$' + f for f in spec.array_fields)}.")
    parts.append("Results are always limited to the caller's own data.")
    return " ".join(parts)


def aggregate_input_schema(spec: AggregateToolSpec) -> dict[str, Any]:
    """Draft 2020-12 schema of ``{pipeline, limit}``; nothing else is accepted."""
    schema: dict[str, Any] = {
        "$schema": DIALECT,
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "pipeline": {
                "type": "array",
                "maxItems": spec.max_stages,
                "default": [],
                "description": pipeline_guide(spec),
                "items": {
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": 1,
                    "propertyNames": {"enum": list(spec.stages)},
                },
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "default": spec.max_limit,
                "description": f"documents returned, at most {spec.max_limit}; larger values are lowered",
            },
        },
    }
    # valid Draft 2020-12 for every spec shape: tests/tools/test_contract.py checks each listed tool's
    # schemas (jsonschema is not imported at start-up: benchmarks/startup.py)
    return schema


def aggregate_output_schema(spec: AggregateToolSpec) -> dict[str, Any]:
    """The find result's shape; the documents hold only what the pipeline produced."""
    document = {
        "type": "object",
        "description": "one result of the pipeline: group keys in _id, accumulator outputs by "
        "name; dates are ISO 8601 text in UTC",
    }
    return result_schema(document, f"more results than limit, or more than {spec.max_groups} groups")
