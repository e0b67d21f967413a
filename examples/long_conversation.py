"""A long conversation: 200 turns, compacted every 50, and a context that stays the same size.

Each turn is begin_turn, then end_turn; every 50 turns the "model" (a stand-in here) summarises
the summary so far plus the messages shown, and stores it with compact_context through the seq
of the turn's final answer. From then on begin_turn returns that summary and only the messages
after it, so the context a model reads stays flat while the session keeps every message.

python examples/long_conversation.py          # the embedded engine in ./.mongogate, tenant "acme"
python examples/long_conversation.py 400 100  # turns, compact every N turns
"""

from __future__ import annotations

import json
import os
import sys
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


def summarise(previous: dict[str, Any] | None, messages: list[dict[str, Any]]) -> str:
    """What a model would write: the old summary folded with the turns it is shown (a stand-in)."""
    topics = sorted({m["content"].split(":")[0] for m in messages if m["role"] == "user"})
    before = previous["text"] if previous else "Nothing yet."
    return f"{before[:400]} Then discussed {len(topics)} topics ({', '.join(topics[:5])}, ...)."


async def main(turns: int = 200, every: int = 50) -> None:
    async with Client(server()) as client:
        session = (await call(client, "create_session", title="a long conversation"))["session_id"]
        sizes: list[int] = []
        for n in range(1, turns + 1):
            text = f"topic {n % 17}: question {n} " + "about the plan " * 12
            start = await call(client, "begin_turn", session_id=session, turn_id=f"t{n}", text=text)
            context_bytes = len(json.dumps(start, separators=(",", ":")).encode())
            sizes.append(context_bytes)
            reply = f"answer {n}: " + "here is what we do next " * 10
            end = await call(
                client,
                "end_turn",
                session_id=session,
                turn_id=f"t{n}",
                lease_id=start["lease_id"],
                reply=reply,
            )
            if n % 10 == 0:
                print(
                    f"turn {n}: context {context_bytes} bytes, {len(start['messages'])} messages, "
                    f"summary through {(start['summary'] or {}).get('through_seq')}, "
                    f"unsummarised {start['unsummarized_bytes']} bytes, advised {start['compaction_advised']}"
                )
            if n % every == 0:
                ctx = await call(client, "load_context", session_id=session)
                summary = summarise(ctx["summary"], ctx["messages"])
                done = await call(
                    client, "compact_context", session_id=session, through_seq=end["seq"], summary=summary
                )
                print(f"compacted through seq {done['through_seq']}: {done['status']}")
        stored = (await call(client, "list_sessions"))["sessions"][0]["last_seq"]
        late = sizes[every:]
        print(f"stored messages: {stored}")
        print(f"context bytes: first {every} turns max {max(sizes[:every])}, after max {max(late or [0])}")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    anyio.run(main, *args)
