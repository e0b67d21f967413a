"""A spec is a find spec or an aggregate spec, chosen by `kind`, through one constructor."""

from __future__ import annotations

from typing import Any

import pytest

from mongogate.demo import FIND_ORDERS, ORDER_STATS
from mongogate.errors import ConfigError
from mongogate.specs import AggregateToolSpec, FindToolSpec, QueryToolSpec

BASE: dict[str, Any] = {
    "name": "t1",
    "description": "d",
    "collection": "orders",
    "tenant_field": "userId",
    "projection": ["status", "total"],
    "fields": {"status": "string", "total": "number"},
}


def test_the_constructor_builds_the_kind_that_kind_names() -> None:
    find, stats = QueryToolSpec(**BASE), QueryToolSpec(**BASE, kind="aggregate")
    assert type(find) is FindToolSpec and type(stats) is AggregateToolSpec
    assert isinstance(find, QueryToolSpec) and isinstance(stats, QueryToolSpec)
    assert stats.measurable == ["total"] and stats.max_groups == 1000
    # a find spec carries no aggregate keys; each dump builds the same spec again
    assert "max_groups" not in find.model_dump() and "stages" not in find.model_dump()
    assert QueryToolSpec(**find.model_dump()) == find and QueryToolSpec(**stats.model_dump()) == stats


def test_aggregate_keys_on_a_find_spec_say_so() -> None:
    with pytest.raises(ConfigError, match=r"\['group_fields', 'max_groups'\] apply to kind = \"aggregate\""):
        QueryToolSpec(**{**BASE, "max_groups": 5, "group_fields": ["status"]})
    # as the one flat model of earlier versions did, a default value is accepted (and dropped)
    assert QueryToolSpec(**{**BASE, "max_groups": 1000, "array_fields": []}) == QueryToolSpec(**BASE)


@pytest.mark.parametrize(("kind", "shown"), [("bogus", " (got 'bogus')"), (None, ""), (3, " (got 3)")])
def test_an_unknown_kind_names_the_two_kinds(kind: object, shown: str) -> None:
    with pytest.raises(ConfigError) as e:
        QueryToolSpec(**{**BASE, "kind": kind})
    expected = f"kind: Input should be 'find' or 'aggregate'{shown}"
    assert str(e.value) == f"query tool 't1': invalid spec\n  {expected}"


def test_a_copy_with_an_update_is_validated_and_may_change_kind() -> None:
    stats = FIND_ORDERS.model_copy(update={"name": "stats", "kind": "aggregate", "sort": None})
    assert isinstance(stats, AggregateToolSpec) and stats.projection == FIND_ORDERS.projection
    with pytest.raises(ConfigError, match="must not be a filterable field"):
        FIND_ORDERS.model_copy(update={"fields": {**FIND_ORDERS.fields, "userId": "string"}})
    assert ORDER_STATS.model_copy() == ORDER_STATS


@pytest.mark.parametrize("tenant", ["$comment", "$expr", "$userId", "user\x00Id"])
@pytest.mark.parametrize("kind", ["find", "aggregate"])
def test_the_tenant_field_is_a_field_name(tenant: str, kind: str) -> None:
    """The tenant is injected as ``{tenant_field: tenant}``: with ``$comment`` (or ``$expr``) that
    is an operator matching every document, so no tenant would be scoped at all, and ``$userId``
    (a field path written in pipeline syntax) fails every call. Old code: accepted all of them."""
    with pytest.raises(ConfigError, match="tenant_field"):
        QueryToolSpec(**{**BASE, "tenant_field": tenant, "kind": kind})
