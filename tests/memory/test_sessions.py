"""list_sessions, delete_session and retention (memory/sessions.py), against the embedded engine.

Time is a ManualClock: activity order comes from moving the clock, never from sleeping.
"""

from __future__ import annotations

import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import MemorySettings
from mongogate.errors import InvalidInput, LeaseLost, NotFound
from mongogate.keyset import encode_cursor
from mongogate.memory.sessions import (
    LIST_INDEX,
    MESSAGE_TTL_INDEX,
    SESSION_TTL_INDEX,
    retention_line,
)
from mongogate.memory.store import MemoryStore
from mongogate.memory.turns import Turns

pytestmark = pytest.mark.anyio


async def test_list_is_newest_activity_first_and_pages_with_an_opaque_cursor(
    store: MemoryStore, turns: Turns, clock: ManualClock
) -> None:
    created = []
    for i in range(5):
        created.append(await store.create_session("acme", f"chat {i}"))
        clock.advance(1)
    # Activity moves an old session to the front: a plain append, then a whole turn.
    await store.append("acme", created[1], "t1", "user", "hello")
    clock.advance(1)
    start = await turns.begin_turn("acme", created[0], "t1", "hi")
    assert start.lease_id is not None
    clock.advance(1)
    await turns.end_turn("acme", created[0], "t1", start.lease_id, "hello back")
    ended = clock.now()

    first = await store.list_sessions("acme", limit=2)
    assert [s.session_id for s in first.sessions] == [created[0], created[1]]
    top = first.sessions[0]
    assert top.title == "chat 0" and top.last_seq == 2 and top.last_activity_at == ended  # the answer commit
    assert top.created_at < top.last_activity_at
    assert first.next_cursor is not None and created[0] not in first.next_cursor  # opaque, not an id
    second = await store.list_sessions("acme", limit=2, cursor=first.next_cursor)
    assert [s.session_id for s in second.sessions] == [created[4], created[3]]
    third = await store.list_sessions("acme", limit=2, cursor=second.next_cursor)
    assert [s.session_id for s in third.sessions] == [created[2]] and third.next_cursor is None
    assert (
        third.sessions[0].last_seq == 0 and third.sessions[0].last_activity_at == third.sessions[0].created_at
    )


async def test_sessions_with_the_same_activity_time_page_without_gaps_or_repeats(store: MemoryStore) -> None:
    ids = {await store.create_session("acme") for _ in range(5)}  # the clock does not move: all tie
    seen: list[str] = []
    cursor = None
    while True:
        page = await store.list_sessions("acme", limit=2, cursor=cursor)
        seen += [s.session_id for s in page.sessions]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 5


async def test_list_never_shows_another_tenants_sessions(store: MemoryStore) -> None:
    mine = await store.create_session("acme", "mine")
    await store.create_session("globex", "theirs")
    page = await store.list_sessions("acme")
    assert [s.session_id for s in page.sessions] == [mine]
    # A cursor pointing into another tenant's ordering still only pages the caller's own sessions.
    forged = encode_cursor(page.sessions[0].last_activity_at.replace(year=2100), "zzzz")
    assert [s.session_id for s in (await store.list_sessions("acme", cursor=forged)).sessions] == [mine]
    assert (await store.list_sessions("initech")).sessions == []


@pytest.mark.parametrize("cursor", ["", "not base64 !", "bnVsbA", 5, "WzEsMl0", "WyJ4IiwieSJd"])
async def test_a_cursor_we_did_not_issue_is_invalid_input(store: MemoryStore, cursor: object) -> None:
    with pytest.raises(InvalidInput, match="cursor is not one list_sessions returned"):
        await store.list_sessions("acme", cursor=cursor)


@pytest.mark.parametrize("limit", [0, 101, "5", True])
async def test_page_limit_is_checked(store: MemoryStore, limit: object) -> None:
    with pytest.raises(InvalidInput, match="limit must be an integer from 1 to 100"):
        await store.list_sessions("acme", limit=limit)


async def test_delete_erases_the_session_and_its_messages_and_is_idempotent(store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    keep = await store.create_session("acme")
    for i in range(3):
        await store.append("acme", sid, f"t{i}", "user", f"m{i}")
    await store.append("acme", keep, "t0", "user", "stays")
    erased = await store.delete_session("acme", sid)
    assert (erased.deleted, erased.messages_deleted) == (True, 3)
    assert await store.messages.count_documents({"session_id": sid}) == 0
    assert await store.sessions.count_documents({"_id": sid}) == 0
    again = await store.delete_session("acme", sid)
    assert (again.deleted, again.messages_deleted) == (False, 0)
    with pytest.raises(NotFound):
        await store.load_context("acme", sid)
    assert [m.content for m in (await store.load_context("acme", keep)).messages] == ["stays"]


async def test_another_tenants_session_looks_missing_and_is_left_alone(store: MemoryStore) -> None:
    sid = await store.create_session("globex")
    await store.append("globex", sid, "t", "user", "secret")
    erased = await store.delete_session("acme", sid)
    assert (erased.deleted, erased.messages_deleted) == (False, 0)
    assert [m.content for m in (await store.load_context("globex", sid)).messages] == ["secret"]


async def test_deleting_while_a_turn_holds_the_lease_fails_that_turn_cleanly(
    store: MemoryStore, turns: Turns
) -> None:
    sid = await store.create_session("acme")
    start = await turns.begin_turn("acme", sid, "t1", "question")
    assert start.lease_id is not None
    assert (await store.delete_session("acme", sid)).deleted
    with pytest.raises(NotFound, match=f"session '{sid}' not found"):
        await store.append("acme", sid, "t1", "tool", "result", "c1", lease_id=start.lease_id)
    with pytest.raises(NotFound, match=f"session '{sid}' not found"):
        await turns.renew_turn("acme", sid, "t1", start.lease_id)
    with pytest.raises(NotFound, match=f"session '{sid}' not found"):
        await turns.end_turn("acme", sid, "t1", start.lease_id, "answer")
    assert await store.messages.count_documents({"session_id": sid}) == 0  # nothing landed afterwards
    with pytest.raises(NotFound):
        await turns.begin_turn("acme", sid, "t1", "question")


async def test_a_write_in_flight_at_delete_is_erased_by_a_repeat(store: MemoryStore) -> None:
    """The documented window: a message numbered before the delete can land after it; a repeat
    of delete_session (idempotent) erases it, and it is never readable through the session."""
    sid = await store.create_session("acme")
    await store.delete_session("acme", sid)
    await store.messages.insert_one(
        {"session_id": sid, "tenant": "acme", "key": "t:user", "seq": 1, "role": "user", "content": "late"}
    )
    assert (await store.delete_session("acme", sid)).messages_deleted == 1


async def test_sessions_from_before_last_activity_existed_are_listed(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, clock: ManualClock
) -> None:
    old = MemoryStore(mongo[db_name], MemorySettings(), clock)
    await old.sessions.insert_one(
        {"_id": "legacy", "tenant": "acme", "title": None, "next_seq": 4, "created_at": clock.now()}
    )
    await old.ensure_indexes()
    page = await old.list_sessions("acme")
    assert [(s.session_id, s.last_seq, s.last_activity_at) for s in page.sessions] == [
        ("legacy", 4, clock.now())
    ]
    assert LIST_INDEX in await old.sessions.index_information()


async def test_retention_is_off_by_default_and_kept_in_step_with_the_setting(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, clock: ManualClock
) -> None:
    async def ttl() -> tuple[object, object]:
        s = await mongo[db_name]["sessions"].index_information()
        m = await mongo[db_name]["messages"].index_information()
        return (
            s.get(SESSION_TTL_INDEX, {}).get("expireAfterSeconds"),
            m.get(MESSAGE_TTL_INDEX, {}).get("expireAfterSeconds"),
        )

    assert MemorySettings().retention_days is None
    await MemoryStore(mongo[db_name], MemorySettings(), clock).ensure_indexes()
    assert await ttl() == (None, None)
    await MemoryStore(mongo[db_name], MemorySettings(retention_days=30), clock).ensure_indexes()
    assert await ttl() == (30 * 86400, 30 * 86400)
    await MemoryStore(mongo[db_name], MemorySettings(retention_days=7), clock).ensure_indexes()
    assert await ttl() == (7 * 86400, 7 * 86400)
    await MemoryStore(mongo[db_name], MemorySettings(), clock).ensure_indexes()
    assert await ttl() == (None, None)  # turned off again: nothing expires any more


def test_retention_line_for_mongogate_check() -> None:
    assert retention_line(MemorySettings()).startswith("retention: off")
    line = retention_line(MemorySettings(retention_days=30))
    assert line.startswith("retention: 30 day(s)") and SESSION_TTL_INDEX in line


async def test_lost_lease_is_still_lease_lost_not_not_found(store: MemoryStore, turns: Turns) -> None:
    """Deleting changes nothing for sessions that still exist: a fenced lease stays lease_lost."""
    sid = await store.create_session("acme")
    first = await turns.begin_turn("acme", sid, "t1", "q")
    second = await turns.begin_turn("acme", sid, "t1", "q")  # a retry takes the lease over
    assert first.lease_id is not None and second.lease_id is not None
    with pytest.raises(LeaseLost):
        await turns.end_turn("acme", sid, "t1", first.lease_id, "a")


async def test_a_cursor_holding_a_lone_surrogate_is_invalid_input(store: MemoryStore) -> None:
    """base64url of [0, "\\ud800"] decoded to a session id BSON cannot encode: list_sessions (and
    resources/list, which pages with the same cursor) answered with an internal error."""
    with pytest.raises(InvalidInput, match="cursor is not one list_sessions returned"):
        await store.list_sessions("acme", cursor="WzAsIlx1ZDgwMCJd")
