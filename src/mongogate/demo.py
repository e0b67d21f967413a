"""Demo data: a small multi-tenant `orders` collection, the `find_orders` tool that reads it and
the `order_stats` aggregation tool that counts and sums it."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pymongo.errors import BulkWriteError

from mongogate.specs import AggregateToolSpec, FindToolSpec, QueryToolSpec
from mongogate.tools.state import AppState

log = logging.getLogger(__name__)

DEMO_TENANTS = ("acme", "globex", "initech")
STATUSES = ("pending", "paid", "shipped", "cancelled")
TAGS = ("gift", "express", "bulk")
#: the demo's index (created by the seeding): every demo query rides it
ORDERS_INDEX: list[tuple[str, Literal[1, -1]]] = [("userId", 1), ("createdAt", -1)]

FIND_ORDERS = FindToolSpec(
    name="find_orders",
    description="Find the caller's orders by status, total or date.",
    collection="orders",
    tenant_field="userId",
    projection=["number", "status", "total", "createdAt"],
    fields={"status": "string", "total": "number", "createdAt": "date", "number": "string"},
    sort={"createdAt": -1},
    max_limit=50,
    max_time_ms=2000,
    index=ORDERS_INDEX,
)

ORDER_STATS = AggregateToolSpec(
    name="order_stats",
    description="Count and sum the caller's orders: per status, per month, per tag...",
    collection="orders",
    tenant_field="userId",
    projection=["number", "status", "total", "createdAt", "tags"],
    fields={
        "status": "string",
        "total": "number",
        "createdAt": "date",
        "number": "string",
        "tags": "string",
    },
    group_fields=["status", "createdAt", "tags"],
    array_fields=["tags"],
    max_limit=100,
    max_time_ms=2000,
    index=ORDERS_INDEX,
)
#: what `--demo` registers
DEMO_SPECS = (FIND_ORDERS, ORDER_STATS)


def seeded_index(spec: QueryToolSpec) -> bool:
    """True when the demo's seeding creates the index ``spec`` declares."""
    return spec.collection == "orders" and spec.index is not None and list(spec.index) == ORDERS_INDEX


def demo_orders() -> list[dict[str, Any]]:
    """Deterministic orders: 12 per tenant, so the demo looks the same on every machine."""
    base = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    docs = []
    for t, tenant in enumerate(DEMO_TENANTS):
        for i in range(12):
            docs.append(
                {
                    "_id": f"{tenant}-{i:03d}",
                    "userId": tenant,
                    "number": f"{tenant[:2].upper()}-{1000 + i}",
                    "status": STATUSES[(i + t) % len(STATUSES)],
                    "total": round(19.5 + 37.25 * i + 3 * t, 2),
                    "createdAt": base + timedelta(days=9 * i + t),
                    "tags": [TAGS[k] for k in range(len(TAGS)) if (i + k) % (k + 2) == 0],
                    "internalNote": f"not for the model ({tenant})",
                }
            )
    return docs


async def seed_demo(state: AppState) -> None:
    coll = state.db.memory["orders"]
    await coll.create_index(list(ORDERS_INDEX), name="tenant_created")
    try:
        await coll.insert_many(demo_orders(), ordered=False)
    except BulkWriteError as e:
        if any(err.get("code") != 11000 for err in e.details.get("writeErrors", [])):
            raise
    log.info(
        "demo data ready: %d orders for tenants %s", await coll.count_documents({}), ", ".join(DEMO_TENANTS)
    )
