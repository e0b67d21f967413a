"""Embed mongogate in an application: register a query tool in code, then serve (docs/API.md).

python examples/embed.py            # stdio, tenant from MONGOGATE_AUTH__TENANT (default "acme")
mongogate check --embed examples/embed.py:registry   # checks the same registry (indexes, drift;
                                                     # the index exists once the app has started)

Only names from the package root (`from mongogate import ...`) are public; every submodule is
private. `build_server` refuses to start while a tool's declared index is missing: this
application creates its own in a start-up hook, which runs before that check.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from mongogate import AppState, QueryToolSpec, Settings, ToolRegistry, build_server, load_settings

RECENT_BIG_ORDERS = QueryToolSpec(
    name="recent_big_orders",
    description="The caller's orders above a total, newest first.",
    collection="orders",
    tenant_field="userId",
    projection=["number", "total", "createdAt"],
    fields={"number": "string", "total": "number", "createdAt": "date"},
    operators=["$gt", "$gte", "$and"],
    sort={"createdAt": -1},
    max_limit=20,
    index=[("userId", 1), ("createdAt", -1)],  # every call rides it (hinted); checked at start
)


async def prepare(state: AppState) -> None:
    """The application's own start-up: its index, and a few orders so the tool has something to read."""
    orders = state.db.memory["orders"]  # the read-write database (tools read through database.query_uri)
    await orders.create_index([("userId", 1), ("createdAt", -1)])
    start = datetime(2026, 1, 5, tzinfo=UTC)
    for tenant, prefix in (("acme", "AC"), ("globex", "GL")):
        for i in range(6):
            number = f"{prefix}-{1000 + i}"
            doc = {"userId": tenant, "total": 40.0 * (i + 1), "createdAt": start + timedelta(days=i)}
            await orders.update_one({"number": number}, {"$setOnInsert": doc}, upsert=True)


def registry(settings: Settings) -> ToolRegistry:
    """The tools this application serves: `mongogate check --embed examples/embed.py:registry`."""
    tools = ToolRegistry.from_settings(settings)  # the memory tools and any [[query_tools]]
    tools.add_query_tool(RECENT_BIG_ORDERS)
    tools.on_startup(prepare)
    return tools


def main() -> None:
    os.environ.setdefault("MONGOGATE_AUTH__TENANT", "acme")
    settings = load_settings()  # $MONGOGATE_CONFIG or defaults; the embedded engine without database.uri
    build_server(settings, registry(settings)).run("stdio")


if __name__ == "__main__":
    main()
