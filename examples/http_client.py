"""Run one turn, two queries and an aggregation against a mongogate server over Streamable HTTP.

export MONGOGATE_TOKEN=...        # printed by `make run`, or: mongogate token --tenant acme
python examples/http_client.py --url http://127.0.0.1:8000/mcp
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, token: str) -> int:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        names = [t.name for t in (await client.list_tools()).tools]
        print("tools:", ", ".join(names))

        async def call(tool: str, **args: Any) -> dict[str, Any]:
            result = await client.call_tool(tool, args)
            if result.is_error:
                raise SystemExit(f"{tool} failed: {result.content[0].text}")  # type: ignore[union-attr]
            return result.structured_content or {}

        session = (await call("create_session", title="example"))["session_id"]
        turn = uuid.uuid4().hex[:8]
        start = await call(
            "begin_turn", session_id=session, turn_id=turn, text="Which of my orders are paid?"
        )
        print("begin_turn:", {k: start[k] for k in ("lease_id", "answered")})
        if "find_orders" in names:
            found = await call("find_orders", filter={"status": "paid"}, limit=5)
            print("find_orders status=paid:", json.dumps(found["documents"], indent=1))
            reply = f"You have {found['returned']} paid order(s) (showing at most 5)."
            bad = await client.call_tool("find_orders", {"filter": {"$where": "sleep(10)"}})
            print("a rejected filter:", bad.content[0].text)  # type: ignore[union-attr]
        else:
            reply = "No query tool is registered on this server."
        if "order_stats" in names:
            year = f"{datetime.now(UTC).year}-01-01T00:00:00Z"
            stats = await call(
                "order_stats",
                pipeline=[
                    {"$match": {"createdAt": {"$gte": year}}},
                    {"$group": {"_id": "$status", "orders": {"$count": {}}, "total": {"$sum": "$total"}}},
                    {"$sort": {"total": -1}},
                ],
            )
            print("orders and total per status this year:", json.dumps(stats["documents"]))
            bad = await client.call_tool(
                "order_stats", {"pipeline": [{"$lookup": {"from": "users", "as": "u"}}]}
            )
            print("a rejected pipeline:", bad.content[0].text)  # type: ignore[union-attr]
        end = await call(
            "end_turn", session_id=session, turn_id=turn, lease_id=start["lease_id"], reply=reply
        )
        print("end_turn:", end)
        replay = await call(
            "begin_turn", session_id=session, turn_id=turn, text="Which of my orders are paid?"
        )
        print("replayed turn returns the stored answer:", replay["answered"], "->", replay["answer"])
        ctx = await call("load_context", session_id=session)
        print("context:", [(m["role"], m["content"][:40]) for m in ctx["messages"]])
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", default="http://127.0.0.1:8000/mcp")
    p.add_argument("--token", default=os.environ.get("MONGOGATE_TOKEN"))
    a = p.parse_args()
    if not a.token:
        sys.exit("set MONGOGATE_TOKEN (printed by `make run`) or pass --token")
    sys.exit(anyio.run(main, a.url, a.token))
