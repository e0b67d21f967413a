"""Specs used across the policy tests: `find_orders` (the demo's spec), and one with the other types."""

from __future__ import annotations

from mongogate.config import PolicySettings
from mongogate.demo import FIND_ORDERS
from mongogate.specs import QueryToolSpec

# The demo's spec, as `--demo` registers it, minus its `index`: these tests' collections carry no
# index, and a hint naming a missing one fails (tests/policy/test_aggregate_db.py covers the hint).
ORDERS = FIND_ORDERS.model_copy(update={"index": None})

ITEMS = QueryToolSpec(
    name="find_items",
    description="Items with every other field type.",
    collection="items",
    tenant_field="org",
    projection=["_id", "qty", "active", "ref", "meta.color"],
    fields={"qty": "int", "active": "bool", "ref": "objectId", "meta.color": "string", "_id": "objectId"},
    operators=["$eq", "$ne", "$in", "$nin", "$exists", "$and", "$or", "$nor", "$gt", "$lt"],
    max_limit=10,
)

LIMITS = PolicySettings()
