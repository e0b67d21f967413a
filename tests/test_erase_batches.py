"""An erasure's work is bounded: every read of documents asks for at most a batch of ids, every
write carries at most a batch of them, and no reply comes near the wire limit, however many
documents the tenant holds (what each command sent and got back, seen by a command listener)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import bson
import pytest
from pymongo import AsyncMongoClient, monitoring

from mongogate.assembly import erasure_plan
from mongogate.erasure import JOURNAL, Sweep, Target

pytestmark = pytest.mark.anyio

BATCH = 50


class Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.largest_reply = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.sent.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self.largest_reply = max(self.largest_reply, len(bson.encode(event.reply)))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def test_every_read_and_write_of_an_erasure_holds_at_most_a_batch(
    engine_uri: str, db_name: str
) -> None:
    now = datetime.now(UTC)
    seen = Commands()
    async with AsyncMongoClient[dict[str, Any]](engine_uri, tz_aware=True, event_listeners=[seen]) as client:
        db = client[db_name]
        big = "x" * 2000
        await db["messages"].insert_many(
            [
                {"_id": f"s{i % 7}:k{i}", "session_id": f"s{i % 7}", "tenant": t, "seq": i, "content": big}
                for i in range(640)
                for t in ("acme" if i % 4 else "globex",)
            ]
        )
        await db["memories"].insert_many(
            [
                {"_id": f"m{i}", "tenant": "acme", "owner": f"u{i % 3}", "text": big, "created_at": now}
                for i in range(260)
            ]
        )
        seen.sent.clear()
        receipt = await Sweep(db, Target.of("acme"), batch=BATCH).run(erasure_plan())
        erasing = list(seen.sent)
        assert receipt.count("messages") == 480 and receipt.count("memories") == 260
        assert await db["messages"].count_documents({"tenant": "globex"}) == 160
    declared = {name for d in erasure_plan() for name in d.collections()}
    for cmd in erasing:
        name = next(iter(cmd))
        target = cmd[name]
        if name == "find" and target in declared and target != JOURNAL:
            assert cmd.get("limit", 0) <= BATCH and cmd.get("projection") == {"_id": 1}, cmd
        elif name == "delete" and target != JOURNAL:
            assert len(cmd["deletes"]) <= BATCH and all(set(d["q"]) == {"_id"} for d in cmd["deletes"]), cmd
        elif name == "update" and target != JOURNAL:
            assert len(cmd["updates"]) <= BATCH, cmd
        elif name == "aggregate":
            assert cmd["pipeline"][-1] == {"$group": {"_id": "$owner"}}, cmd  # one row per scope
    deletes = [c for c in erasing if "delete" in c and c["delete"] == "messages"]
    assert len(deletes) == 480 // BATCH + (480 % BATCH > 0)
    assert seen.largest_reply < 64 * 1024  # ids only: 2 KB documents never travel
