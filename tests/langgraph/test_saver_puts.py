"""Issue 27.2: the saver's checkpoint and write puts are an insert (flat on the embedded engine),
never an upsert (which scans the collection when it matches nothing); a repeat replaces
(checkpoints, special channels) or keeps (regular writes) what is stored, as the upserts did."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="needs the extra: pip install 'mongogate[langgraph]'")

from pymongo import AsyncMongoClient, monitoring

from mongogate.langgraph.saver import put_doc

pytestmark = pytest.mark.anyio


class Sent(monitoring.CommandListener):
    def __init__(self) -> None:
        self.commands: list[tuple[str, bool]] = []  # (name, any upsert)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in ("insert", "update"):
            ups = any(u.get("upsert") for u in event.command.get("updates", []))
            self.commands.append((event.command_name, ups))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def test_a_put_is_an_insert_and_a_repeat_replaces_or_keeps(engine_uri: str, db_name: str) -> None:
    sent = Sent()
    async with AsyncMongoClient[dict[str, Any]](engine_uri, event_listeners=[sent]) as c:
        coll = c[db_name]["lg_checkpoints"]
        await put_doc(coll, "k1", {"v": 1}, replace=True)
        assert sent.commands == [("insert", False)]
        await put_doc(coll, "k1", {"v": 2}, replace=True)  # a checkpoint put again: the new one stands
        await put_doc(coll, "k2", {"v": 1}, replace=False)
        await put_doc(coll, "k2", {"v": 2}, replace=False)  # a regular write put again: the first stays
        assert [d async for d in coll.find({}).sort("_id", 1)] == [
            {"_id": "k1", "v": 2},
            {"_id": "k2", "v": 1},
        ]
        assert not any(ups for _, ups in sent.commands)
