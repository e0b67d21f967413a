"""Embed mongogate in an application: register a query tool in code, then serve.

python examples/embed.py            # stdio, tenant from MONGOGATE_AUTH__TENANT (default "acme")
mongogate check --embed examples/embed.py:registry   # checks the same registry (indexes, drift)
"""

from __future__ import annotations

import os

from mongogate.config import Settings, load_settings
from mongogate.demo import seed_demo
from mongogate.server.app import build_server
from mongogate.specs import QueryToolSpec
from mongogate.tools.registry import ToolRegistry


def registry(settings: Settings) -> ToolRegistry:
    """The tools this application serves: `mongogate check --embed examples/embed.py:registry`."""
    tools = ToolRegistry.from_settings(settings)
    tools.add_query_tool(
        QueryToolSpec(
            name="recent_big_orders",
            description="The caller's orders above a total, newest first.",
            collection="orders",
            tenant_field="userId",
            projection=["number", "total", "createdAt"],
            fields={"number": "string", "total": "number", "createdAt": "date"},
            operators=["$gt", "$gte", "$and"],
            sort={"createdAt": -1},
            max_limit=20,
        )
    )
    tools.on_startup(seed_demo)  # demo orders, so the tool has something to read
    return tools


def main() -> None:
    os.environ.setdefault("MONGOGATE_AUTH__TENANT", "acme")
    settings = load_settings()  # $MONGOGATE_CONFIG or defaults; the embedded engine without database.uri
    build_server(settings, registry(settings)).run("stdio")


if __name__ == "__main__":
    main()
