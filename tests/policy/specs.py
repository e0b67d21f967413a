"""Specs used across the policy tests: `find_orders` from DESIGN.md, and one with the other types."""

from __future__ import annotations

from mongogate.config import PolicySettings
from mongogate.policy.spec import QueryToolSpec

ORDERS = QueryToolSpec(
    name="find_orders",
    description="Find the caller's orders by status, total or date.",
    collection="orders",
    tenant_field="userId",
    projection=["number", "status", "total", "createdAt"],
    fields={"status": "string", "total": "number", "createdAt": "date", "number": "string"},
    sort={"createdAt": -1},
    max_limit=50,
    max_time_ms=2000,
)

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
