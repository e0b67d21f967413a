"""Long-term memory across sessions: remember in one conversation, recall in a new one.

Each conversation is its own `mongogate serve` process over stdio (as a desktop client launches
it); what the first one remembers, the second one finds again by meaning and by exact term.

python examples/long_term_memory.py          # the embedded engine in ./.mongogate, tenant "acme"
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any

import anyio
from mcp import Client, StdioServerParameters


def server() -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k.startswith("MONGOGATE_")}
    env.setdefault("MONGOGATE_AUTH__TENANT", "acme")
    return StdioServerParameters(command=sys.executable, args=["-m", "mongogate.cli", "serve"], env=env)


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise SystemExit(f"{tool} failed: {result.content[0].text}")  # type: ignore[union-attr]
    return result.structured_content or {}


async def first_conversation() -> None:
    async with Client(server()) as client:
        session = (await call(client, "create_session", title="monday"))["session_id"]
        turn = await call(client, "begin_turn", session_id=session, turn_id="t1", text="I moved to Lisbon.")
        for fact, key in [
            ("The user lives in Lisbon since March.", "home_city"),
            ("The user's laptop has serial number SN-48213-QX.", "laptop_serial"),
            ("The user is allergic to peanuts.", "allergy"),
        ]:
            r = await call(client, "remember", text=fact, namespace="user/profile", key=key)
            print(f"remember {key}: {r['status']} (version {r['version']})")
        await call(
            client, "end_turn", session_id=session, turn_id="t1", lease_id=turn["lease_id"], reply="Noted!"
        )


async def second_conversation() -> None:
    async with Client(server()) as client:  # a new process: nothing but the database is shared
        await call(client, "create_session", title=f"later {uuid.uuid4().hex[:6]}")
        for question in ["Which city does the user live in?", "SN-48213-QX", "food the user cannot eat"]:
            found = await call(client, "recall", query=question, namespace="user", limit=1)
            best = found["memories"][0]["text"] if found["memories"] else "(nothing)"
            print(f"recall {question!r}: {best}")
        said = await call(client, "search_messages", query="Lisbon")
        print(f"search_messages 'Lisbon': {[m['content'] for m in said['messages']]}")


async def main() -> None:
    await first_conversation()
    await second_conversation()


if __name__ == "__main__":
    anyio.run(main)
