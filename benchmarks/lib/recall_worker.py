"""One server of benchmarks/recall_vs_base.py: `build_server` of whichever mongogate is first on
`sys.path` (the caller sets PYTHONPATH to a checkout's `src`), driven over stdin/stdout.

Commands, one JSON line each: `{"open": {"uri", "db", "data_dir", "tenant"}}` builds the server on
that database and warms it (one recall: the scope's index built); `{"recall": query}` answers the
recall's wall time in ms through the SDK's in-process client (legacy JSON-RPC framing, as
recall_index.py); `{"which": true}` answers the mongogate file imported. Only the public API and
the SDK are used, so the same file drives any version.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from contextlib import AsyncExitStack
from typing import Any

from mcp import Client


async def main() -> None:
    loop = asyncio.get_running_loop()
    client: Any = None
    async with AsyncExitStack() as stack:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            reply = await answer(json.loads(line), stack, client)
            if isinstance(reply, tuple):
                client, reply = reply
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


async def answer(cmd: dict[str, Any], stack: AsyncExitStack, client: Any) -> Any:
    import mongogate
    from mongogate.config import load_settings
    from mongogate.server.app import build_server

    if "which" in cmd:
        return mongogate.__file__
    if "open" in cmd:
        o = cmd["open"]
        settings = load_settings(
            None,
            database={"uri": o["uri"], "name": o["db"]},
            server={"data_dir": o["data_dir"], "metrics": True},
            auth={"mode": "none", "tenant": o["tenant"]},
            memory={"long_term": {"max_per_scope": 50_000}},
        )
        opened = await stack.enter_async_context(Client(build_server(settings), mode="legacy"))
        await opened.call_tool("recall", {"query": o["warm"]})
        return opened, "ok"
    t0 = time.perf_counter()
    r = await client.call_tool("recall", {"query": cmd["recall"]})
    ms = (time.perf_counter() - t0) * 1000
    return f"error: {r.content}" if getattr(r, "is_error", False) else ms


if __name__ == "__main__":
    asyncio.run(main())
