"""Investigations: the partial unique index lets exactly one active item exist per trigger."""

from __future__ import annotations

import anyio
import pytest
from pymongo import AsyncMongoClient

from mongogate.errors import InvalidInput, NotFound
from mongogate.scheduler.investigations import Investigations, OpenResult
from tests.scheduler.helpers import Client

pytestmark = pytest.mark.anyio


async def test_agents_opening_the_same_investigation_at_once_make_exactly_one_row(
    engine_uri: str, db_name: str
) -> None:
    clients: list[Client] = [AsyncMongoClient(engine_uri, tz_aware=True) for _ in range(2)]
    try:
        a, b = (Investigations(c[db_name]) for c in clients)
        await a.ensure_indexes()
        results: list[OpenResult] = []

        async def open_(inv: Investigations, who: str) -> None:
            results.append(await inv.open("acme", "stock-watch", "sku-42:low", f"low stock ({who})"))

        for _ in range(3):  # several rounds of the same race, to give it chances to go wrong
            async with anyio.create_task_group() as tg:
                tg.start_soon(open_, a, "a")
                tg.start_soon(open_, b, "b")
        assert sorted(r.status for r in results) == ["already_open"] * 5 + ["opened"]
        assert len({r.investigation.id for r in results}) == 1
        assert await a.coll.count_documents({}) == 1

        # once it is closed, the same trigger opens a new item; the closed one stays as history
        first = results[0].investigation
        closed = await a.close("acme", first.id, "restocked")
        assert closed.status == "closed" and closed.resolution == "restocked" and closed.closed_at
        again = await b.open("acme", "stock-watch", "sku-42:low")
        assert again.status == "opened" and again.investigation.id != first.id
        assert await a.coll.count_documents({}) == 2
        assert await a.coll.count_documents({"status": "open"}) == 1
    finally:
        for c in clients:
            await c.close()


async def test_in_progress_still_blocks_and_other_triggers_do_not(mongo: Client, db_name: str) -> None:
    inv = Investigations(mongo[db_name])
    await inv.ensure_indexes()
    item = (await inv.open("acme", "watch", "sig", "t", {"n": 1})).investigation
    started = await inv.set_status("acme", item.id, "in_progress")
    assert started.status == "in_progress" and started.details == {"n": 1}
    dup = await inv.open("acme", "watch", "sig")
    assert dup.status == "already_open" and dup.investigation.id == item.id
    # another tenant, agent or signature is another item
    assert (await inv.open("other", "watch", "sig")).status == "opened"
    assert (await inv.open("acme", "other-agent", "sig")).status == "opened"
    assert (await inv.open("acme", "watch", "sig2")).status == "opened"
    active = await inv.active("acme", "watch", "sig")
    assert active is not None and active.id == item.id
    assert len(await inv.list_items("acme")) == 3

    await inv.close("acme", item.id)
    assert (await inv.close("acme", item.id)).status == "closed"  # closing twice is fine
    with pytest.raises(InvalidInput, match="is closed"):
        await inv.set_status("acme", item.id, "open")
    assert await inv.active("acme", "watch", "sig") is None
    with pytest.raises(NotFound):
        await inv.close("other", item.id)  # another tenant's item looks missing
    with pytest.raises(InvalidInput, match="use close"):
        await inv.set_status("acme", item.id, "closed")
    with pytest.raises(InvalidInput, match="trigger_signature must be a non-empty string"):
        await inv.open("acme", "watch", "")


async def test_list_for_agent_gives_one_agents_active_items_across_tenants(
    mongo: Client, db_name: str
) -> None:
    """What examples/agents.py sweeps through the public API (it read the collection before)."""
    inv = Investigations(mongo[db_name])
    await inv.ensure_indexes()
    a = await inv.open("acme", "sweeper", "t1")
    await inv.open("globex", "sweeper", "t2")
    await inv.open("acme", "other-agent", "t3")
    await inv.close("acme", a.investigation.id, "done")
    items = await inv.list_for_agent("sweeper")
    assert [(i.tenant, i.trigger_signature) for i in items] == [("globex", "t2")]
