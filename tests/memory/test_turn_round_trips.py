"""Issue 27.1: a fenced turn is 5 round trips on the sessions and messages (begin_turn 3, end_turn 2),
counted per tool with a command listener, and the paths around it (a lost-reply retry, a replay, a
heartbeat). Since issue 36 each write of messages adds its scope's revision bracket (`BRACKETED`:
two updates by `_id` of one small document): 9 in all."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from mongogate.config import MemorySettings
from mongogate.errors import NotFound
from mongogate.memory.store import MemoryStore
from mongogate.memory.turns import Turns
from mongogate.runs.service import Runs
from tests.memory.test_store import Commands, listened_store

pytestmark = pytest.mark.anyio

#: an insert of messages, inside its scope's revision bracket (`memory/guard.py`: in flight, then
#: bumped; two updates by `_id`, flat in the collections' sizes): what message search's indexes need
BRACKETED = ["update", "insert", "update"]


async def test_a_fenced_turn_is_five_round_trips_and_two_bracket_updates_per_write(
    engine_uri: str, db_name: str
) -> None:
    listener = Commands()
    async with listened_store(engine_uri, db_name, listener) as store:
        turns = Turns(store)
        sid = await store.create_session("acme")
        for turn in ("t1", "t2", "t3"):  # the second and third find the previous answer parked
            listener.names.clear()
            start = await turns.begin_turn("acme", sid, turn, f"question {turn}")
            assert start.lease_id and listener.names == ["findAndModify", *BRACKETED, "find"], turn
            listener.names.clear()
            end = await turns.end_turn("acme", sid, turn, start.lease_id, f"answer {turn}")
            assert end.status == "inserted" and listener.names == ["findAndModify", *BRACKETED], turn

        parked = await store.sessions.find_one({"_id": sid})  # each commit drops the answers before it
        assert parked is not None and [p["key"] for p in parked["pending"]] == ["t3:assistant"]

        # A lost begin_turn reply: the retry takes the lease over, same three round trips.
        first = await turns.begin_turn("acme", sid, "t4", "question t4")
        listener.names.clear()
        retry = await turns.begin_turn("acme", sid, "t4", "question t4")
        assert retry.lease_id and retry.lease_id != first.lease_id
        assert listener.names == ["findAndModify", *BRACKETED, "find"]
        listener.names.clear()  # a heartbeat is one update
        await turns.renew_turn("acme", sid, "t4", retry.lease_id)
        assert listener.names == ["findAndModify"]
        await turns.end_turn("acme", sid, "t4", retry.lease_id, "answer t4")

        # A replay of the answered turn: the stored answer, no lease taken.
        listener.names.clear()
        again = await turns.begin_turn("acme", sid, "t4", "question t4")
        assert again.answered and again.answer == "answer t4" and again.lease_id is None
        assert listener.names == ["findAndModify", "find"]

        # A lost end_turn reply: the retry says duplicate, the same seq.
        listener.names.clear()
        dup = await turns.end_turn("acme", sid, "t4", retry.lease_id, "answer t4")
        assert dup.status == "duplicate" and len(listener.names) <= 7  # settles the parked copy too
        session = await store.sessions.find_one({"_id": sid})
        keys = [d["key"] async for d in store.messages.find({"session_id": sid}, sort=[("seq", 1)])]
    # At most the last answer stays parked on the session (each commit drops the ones before it;
    # the retried end_turn above settled it).
    assert session is not None and len(session.get("pending") or []) <= 1
    assert keys == [f"t{i}:{role}" for i in range(1, 5) for role in ("user", "assistant")]


async def test_a_fenced_turn_with_k_tool_messages_is_five_plus_two_k_round_trips_and_the_brackets(
    engine_uri: str, db_name: str
) -> None:
    """Issue 38.3: every leased append is 2 round trips, the first after a fenced turn too (it
    settled the previous answer's parked copy: a duplicate insert, a find and a `$pull`, 5 in all).
    Its update drops that copy: the lease proves its begin_turn stored it."""
    listener = Commands()
    async with listened_store(engine_uri, db_name, listener) as store:
        turns = Turns(store)
        sid = await store.create_session("acme")
        for turn in ("t1", "t2", "t3"):
            listener.names.clear()
            start = await turns.begin_turn("acme", sid, turn, f"question {turn}")
            assert start.lease_id and listener.names == ["findAndModify", *BRACKETED, "find"], turn
            for i in range(2):
                for role, text in (("assistant", f"call {turn}.{i}"), ("tool", f"result {turn}.{i}")):
                    listener.names.clear()
                    r = await store.append("acme", sid, turn, role, text, f"c{i}", lease_id=start.lease_id)
                    assert r.status == "inserted", (turn, i, role)
                    assert listener.names == ["findAndModify", *BRACKETED], (turn, i, role)
            parked = await store.sessions.find_one({"_id": sid})
            assert parked is not None and not parked.get("pending"), turn  # the copy went with the first
            listener.names.clear()
            end = await turns.end_turn("acme", sid, turn, start.lease_id, f"answer {turn}")
            assert end.status == "inserted" and listener.names == ["findAndModify", *BRACKETED], turn
        # A repeat of a tool message under the lease: the stored copy's seq, one read more.
        listener.names.clear()
        again = await turns.begin_turn("acme", sid, "t4", "question t4")
        assert again.lease_id
        first = await store.append("acme", sid, "t4", "tool", "r", "c0", lease_id=again.lease_id)
        listener.names.clear()
        dup = await store.append("acme", sid, "t4", "tool", "r", "c0", lease_id=again.lease_id)
        assert (dup.status, dup.seq) == ("duplicate", first.seq)
        assert listener.names == ["findAndModify", *BRACKETED, "find"]
        stored = store.messages.find({"session_id": sid}, sort=[("seq", 1)])
        rows = [(d["key"], d["seq"]) async for d in stored]
    per_turn = ["user", "assistant:c0", "tool:c0", "assistant:c1", "tool:c1", "assistant"]
    want = [f"t{i}:{k}" for i in range(1, 4) for k in per_turn] + ["t4:user", "t4:tool:c0"]
    assert [k for k, _ in rows] == want
    assert len({s for _, s in rows}) == len(rows)


async def test_a_plain_append_after_a_fenced_turn_is_three_round_trips_and_its_bracket(
    engine_uri: str, db_name: str
) -> None:
    """Without a lease nothing proves the parked answer was stored (its end_turn may have died
    before the insert), so the first plain append writes it with its own message in one insert
    (a duplicate when stored) and pulls the copy: 3 round trips, not 5; the next one 2."""
    listener = Commands()
    async with listened_store(engine_uri, db_name, listener) as store:
        turns = Turns(store)
        sid = await store.create_session("acme")
        start = await turns.begin_turn("acme", sid, "t1", "question")
        assert start.lease_id
        await turns.end_turn("acme", sid, "t1", start.lease_id, "answer")
        listener.names.clear()
        assert (await store.append("acme", sid, "t2", "user", "next")).status == "inserted"
        assert listener.names == ["findAndModify", *BRACKETED, "update"]
        session = await store.sessions.find_one({"_id": sid})
        assert session is not None and not session.get("pending")
        listener.names.clear()
        assert (await store.append("acme", sid, "t2", "tool", "result", "c1")).status == "inserted"
        assert listener.names == ["findAndModify", *BRACKETED]
        listener.names.clear()  # a repeat of the plain append: its stored seq
        assert (await store.append("acme", sid, "t2", "user", "next")).status == "duplicate"
        assert listener.names == ["findAndModify", *BRACKETED, "find"]
        contents = [d["content"] async for d in store.messages.find({"session_id": sid}, sort=[("seq", 1)])]
    assert contents == ["question", "answer", "next", "result"]


class Filters(Commands):
    """The filter of every findAndModify and update the driver sends."""

    def __init__(self) -> None:
        super().__init__()
        self.filters: list[tuple[str, str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        cmd = event.command
        if event.command_name == "findAndModify":
            self.filters.append((event.command_name, cmd["findAndModify"], cmd.get("query")))
        elif event.command_name == "update":
            for u in cmd.get("updates", []):
                self.filters.append((event.command_name, cmd["update"], u.get("q")))


async def test_lease_writes_are_addressed_by_id_alone(engine_uri: str, db_name: str) -> None:
    """Issue 27.2: the engine serves a write filtered by `_id` alone without a scan; every lease
    write of a turn and of a run must be one (a filter with a second field grows with the collection)."""
    listener = Filters()
    async with AsyncMongoClient[dict[str, Any]](engine_uri, tz_aware=True, event_listeners=[listener]) as c:
        store = MemoryStore(c[db_name], MemorySettings())
        await store.ensure_indexes()
        turns = Turns(store)
        runs = Runs(c[db_name], MemorySettings())
        await runs.ensure_indexes()
        sid = await store.create_session("acme")
        await store.append("acme", sid, "t0", "assistant", "old answer")  # a plain answer (not a lease)
        listener.filters.clear()
        start = await turns.begin_turn("acme", sid, "t1", "q")
        assert start.lease_id
        await turns.renew_turn("acme", sid, "t1", start.lease_id)
        await store.append("acme", sid, "t1", "tool", "r", "c1", lease_id=start.lease_id)  # issue 38.3
        await turns.end_turn("acme", sid, "t1", start.lease_id, "a")
        assert (await turns.begin_turn("acme", sid, "t0", "q0")).answered  # taken, then given back
        lease = await runs.acquire("acme", "r1")
        await runs.heartbeat("acme", "r1", lease.lease_id)
        assert await runs.release("acme", "r1", lease.lease_id)
    writes = [(name, coll) for name, coll, _ in listener.filters]
    assert {("findAndModify", "sessions"), ("update", "sessions"), ("findAndModify", "runs")} <= set(writes)
    wider = [f for f in listener.filters if f[1] in ("sessions", "runs") and set(f[2]) != {"_id"}]
    assert not wider, wider


async def test_an_answer_lost_by_a_crash_lands_before_the_next_turn(engine_uri: str, db_name: str) -> None:
    """A crash between the commit and the answer's insert leaves it parked; the next turn's window
    lacks it, so begin_turn writes it and reads the window again: the next turn sees it, in order."""
    async with AsyncMongoClient[dict[str, Any]](engine_uri, tz_aware=True) as c:
        store = MemoryStore(c[db_name], MemorySettings())
        await store.ensure_indexes()
        turns = Turns(store)
        sid = await store.create_session("acme")
        start = await turns.begin_turn("acme", sid, "t1", "q1")
        assert start.lease_id

        class Crash(BaseException):
            pass

        def crash(at: str) -> None:
            if at == "answer.after_commit":
                raise Crash

        store.fault = crash
        with pytest.raises(Crash):
            await turns.end_turn("acme", sid, "t1", start.lease_id, "a1")
        store.fault = None
        assert await store.messages.count_documents({"session_id": sid}) == 1  # the answer is only parked
        nxt = await turns.begin_turn("acme", sid, "t2", "q2")
        assert nxt.lease_id and [m.content for m in nxt.messages] == ["q1", "a1", "q2"]
        await turns.end_turn("acme", sid, "t2", nxt.lease_id, "a2")
        contents = [d["content"] async for d in store.messages.find({"session_id": sid}, sort=[("seq", 1)])]
    assert contents == ["q1", "a1", "q2", "a2"]


async def test_a_compacted_session_still_begins_a_turn_in_three_round_trips_and_its_bracket(
    engine_uri: str, db_name: str
) -> None:
    """The newest summary rides on the session document the lease take returns, so a turn of a
    compacted session reads no summary of its own (a separate lookup made begin_turn 4 trips), and
    a newer compaction replaces the published one while an older retry does not move it back."""
    listener = Commands()
    async with listened_store(engine_uri, db_name, listener) as store:
        turns = Turns(store)
        sid = await store.create_session("acme")
        seqs = []
        for turn in ("t1", "t2", "t3"):
            start = await turns.begin_turn("acme", sid, turn, f"question {turn}")
            seqs.append((await turns.end_turn("acme", sid, turn, start.lease_id, f"answer {turn}")).seq)
        assert (
            await store.compact_context("acme", sid, seqs[1], "$t1 and t2: asked, answered")
        ).status == "inserted"
        assert (
            await store.compact_context("acme", sid, seqs[0], "t1 only")
        ).status == "inserted"  # older: kept back
        listener.names.clear()
        start = await turns.begin_turn("acme", sid, "t4", "question t4")
        assert listener.names == ["findAndModify", *BRACKETED, "find"]
        assert start.summary is not None and start.summary.through_seq == seqs[1]
        assert start.summary.text == "$t1 and t2: asked, answered"  # stored as text, never a field path
        assert [m.content for m in start.messages] == ["question t3", "answer t3", "question t4"]
        other = await store.sessions.find_one({"_id": sid})
        assert other is not None and other["summary"]["through_seq"] == seqs[1]
        # another tenant's compaction of this id is refused and publishes nothing
        with pytest.raises(NotFound):
            await store.compact_context("globex", sid, seqs[2], "not yours")
        again = await store.sessions.find_one({"_id": sid})
        assert again is not None and again["summary"]["through_seq"] == seqs[1]
