"""`mongogate erase --tenant A` at 10,000 messages, against the hand-written script it replaces
(one `delete_many` / `update_many` per collection with the tenant's filter), measured in the same
run on identical databases, interleaved (round 1 ours first, round 2 the script first).

    python benchmarks/erase.py --messages 10000 --memories 1000 --events 200 --rounds 2

Each database holds the same amount for a second tenant, which both leave alone. The engine runs
in its own process (as `mongogate serve` reaches it), through `mongogate.db.Database`. Ours is
bounded (batches of 256 ids, deletes by `_id`), journaled, resumable and keeps recall coherent;
the script is none of those.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lib.results import command_line, parser, publish

from mongogate.assembly import erasure_plan
from mongogate.config import load_settings
from mongogate.db import Database
from mongogate.erasure import Sweep, Target

TENANTS = ("acme", "globex")


async def seed(db: Any, messages: int, memories: int, events: int) -> None:
    now = datetime.now(UTC)
    text = "a message of about two hundred bytes, " * 5
    for tenant in TENANTS:
        await db["sessions"].insert_many(
            [{"_id": f"{tenant}-s{s}", "tenant": tenant, "next_seq": 0, "created_at": now} for s in range(20)]
        )
        for at in range(0, messages, 1000):
            await db["messages"].insert_many(
                [
                    {
                        "_id": f"{tenant}-s{i % 20}:k{i}",
                        "session_id": f"{tenant}-s{i % 20}",
                        "tenant": tenant,
                        "seq": i,
                        "content": text,
                        "created_at": now,
                    }
                    for i in range(at, min(at + 1000, messages))
                ]
            )
        for at in range(0, memories, 1000):
            await db["memories"].insert_many(
                [
                    {
                        "_id": f"{tenant}-m{i}",
                        "tenant": tenant,
                        "owner": f"u{i % 4}",
                        "text": text,
                        "version": 1,
                        "created_at": now,
                        "updated_at": now,
                    }
                    for i in range(at, min(at + 1000, memories))
                ]
            )
        await db["memory_revisions"].insert_many(
            [{"_id": f"{len(tenant)}:{tenant}:u{o}", "rev": memories // 4} for o in range(4)]
        )
        await db["audit_events"].insert_many(
            [
                {
                    "_id": f"{tenant}-e{i}",
                    "tenant": tenant,
                    "principal": "p",
                    "event": "filter_rejected",
                    "tool": "find_orders",
                    "ts": now,
                    "filter": "{}",
                }
                for i in range(events)
            ]
        )
    for coll in ("sessions", "messages", "memories"):
        await db[coll].create_index("tenant")


async def script(db: Any) -> int:
    """What an operator wrote before: one unbounded write per collection."""
    n = 0
    for coll in ("sessions", "summaries", "messages", "memories", "memory_versions"):
        n += (await db[coll].delete_many({"tenant": "acme"})).deleted_count
    prefix = "4:acme:"
    n += (await db["memory_revisions"].delete_many({"_id": {"$gte": prefix, "$lt": "4:acme;"}})).deleted_count
    for coll in ("runs", "run_events", "investigations"):
        n += (await db[coll].delete_many({"tenant": "acme"})).deleted_count
    done = await db["audit_events"].update_many({"tenant": "acme"}, {"$set": {"tenant": None}})
    return int(n + done.modified_count)


async def ours(db: Any) -> int:
    receipt = await Sweep(db, Target.of("acme")).run(erasure_plan())
    return receipt.total("removed") + receipt.total("redacted")


async def run(messages: int, memories: int, events: int, rounds: int) -> str:
    load0 = os.getloadavg()
    rows: list[str] = []
    times: dict[str, list[float]] = {"ours": [], "script": []}
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(None, server={"data_dir": tmp})
        db = Database(settings.database, settings.server.data_dir)
        await db.open()
        try:
            for r in range(rounds):
                order = ("ours", "script") if r % 2 == 0 else ("script", "ours")
                for name in order:
                    target = db.client[f"erase_{name}_{r}"]
                    await seed(target, messages, memories, events)
                    t0 = time.perf_counter()
                    n = await (ours(target) if name == "ours" else script(target))
                    dt = time.perf_counter() - t0
                    left = await target["messages"].count_documents({"tenant": "globex"})
                    assert left == messages, left  # the other tenant is untouched by both
                    times[name].append(dt)
                    rows.append(f"| {r + 1} | {name} | {n:,} | {dt:.1f} | {n / dt:,.0f} |")
                    await db.client.drop_database(f"erase_{name}_{r}")
        finally:
            await db.close()
    load1 = os.getloadavg()
    ratio = sum(times["ours"]) / sum(times["script"])
    body = [
        f"Command: `{command_line('erase.py', None)}`; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; the engine in "
        f"its own process; load average {load0[0]:.2f}, {load0[1]:.2f}, {load0[2]:.2f} at the start, "
        f"{load1[0]:.2f}, {load1[1]:.2f}, {load1[2]:.2f} at the end (2 cores, shared).",
        "",
        f"Tenant `acme`: {messages:,} messages in 20 sessions, {memories:,} memories over 4 scopes, "
        f"{events:,} audit events; `globex` the same, untouched by both.",
        "",
        "| round | run | documents | s | documents/s |",
        "|---:|---|---:|---:|---:|",
        *rows,
        "",
        f"ours ÷ script (time, all rounds): {ratio:.2f}x.",
        "",
    ]
    return "\n".join(body)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--messages", type=int, default=10_000)
    p.add_argument("--memories", type=int, default=1_000)
    p.add_argument("--events", type=int, default=200)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    body = asyncio.run(run(args.messages, args.memories, args.events, args.rounds))
    publish("erase at 10,000 messages (issue 39 item 4)", body, not args.no_write)


if __name__ == "__main__":
    main()
