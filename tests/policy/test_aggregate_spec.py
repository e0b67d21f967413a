"""Aggregate specs: defaults, and the keys that cannot widen what the walk can check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mongogate.config import load_settings
from mongogate.demo import ORDER_STATS
from mongogate.errors import ConfigError
from mongogate.specs import SUPPORTED_ACCUMULATORS, SUPPORTED_STAGES, AggregateToolSpec, QueryToolSpec

BASE: dict[str, Any] = {
    "name": "stats",
    "kind": "aggregate",
    "description": "totals",
    "collection": "orders",
    "tenant_field": "userId",
    "projection": ["_id", "status", "total", "createdAt", "qty"],
    "fields": {"status": "string", "total": "number", "createdAt": "date", "qty": "int", "note": "string"},
}


def test_defaults_come_from_the_projection() -> None:
    spec = QueryToolSpec(**BASE)
    assert isinstance(spec, AggregateToolSpec)  # the constructor builds the kind `kind` names
    assert spec.groupable == ["status", "total", "createdAt", "qty"]  # never _id by default
    assert spec.measurable == ["total", "createdAt", "qty"]
    assert spec.accumulators == list(SUPPORTED_ACCUMULATORS) and spec.stages == list(SUPPORTED_STAGES)
    assert (spec.max_stages, spec.max_groups, spec.array_fields) == (8, 1000, [])


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"measure_fields": ["status"]}, "must be declared number, int or date"),
        ({"measure_fields": ["note"]}, "not projected"),
        ({"group_fields": ["note"]}, "not projected"),
        ({"array_fields": ["userId"]}, "not projected"),
        ({"stages": ["$match", "$lookup"]}, "cannot be allowed"),
        ({"accumulators": ["$push"]}, "cannot be allowed"),
        ({"max_stages": 0}, "greater than or equal to 1"),
        ({"index": [["createdAt", 1]]}, "must start with the tenant field"),
        ({"index": [["userId", 1], ["userId", -1]]}, "distinct"),
    ],
)
def test_bad_aggregate_keys_are_config_errors(extra: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        QueryToolSpec(**{**BASE, **extra})


def test_a_config_file_registers_an_aggregate_tool(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        "[[query_tools]]\n"
        'name = "order_stats"\nkind = "aggregate"\ndescription = "d"\ncollection = "orders"\n'
        'tenant_field = "userId"\nprojection = ["status", "total", "tags"]\n'
        'fields = { status = "string", total = "number", tags = "string" }\n'
        'array_fields = ["tags"]\nmax_groups = 50\nindex = [["userId", 1], ["status", 1]]\n'
        "[policy]\nmax_count = 500\n"
    )
    settings = load_settings(config)
    (spec,) = settings.query_tools
    assert isinstance(spec, AggregateToolSpec)
    assert spec.kind == "aggregate" and spec.max_groups == 50 and spec.index == [("userId", 1), ("status", 1)]
    assert settings.policy.max_count == 500
    assert QueryToolSpec(**spec.model_dump()) == spec  # a dump round-trips
    assert QueryToolSpec(**ORDER_STATS.model_dump()) == ORDER_STATS
