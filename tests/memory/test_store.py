"""Messages: one document each, deterministic keys, atomic seq, turn-boundary windows."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient, monitoring

from mongogate.config import MemorySettings
from mongogate.errors import Conflict, InvalidInput, NotFound
from mongogate.memory.store import MemoryStore
from tests.helpers import stress

pytestmark = pytest.mark.anyio

#: an insert of messages, inside its scope's revision bracket (`memory/guard.py`: in flight, then
#: bumped; two updates by `_id`, flat in the collections' sizes): what message search's indexes need
BRACKETED = ["update", "insert", "update"]


async def test_append_returns_keys_and_increasing_seq(store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    r1 = await store.append("acme", sid, "t1", "user", "hi")
    r2 = await store.append("acme", sid, "t1", "assistant", "calling", "c1")
    r3 = await store.append("acme", sid, "t1", "tool", "42", "c1")
    r4 = await store.append("acme", sid, "t1", "assistant", "it is 42")
    assert [r.key for r in (r1, r2, r3, r4)] == ["t1:user", "t1:assistant:c1", "t1:tool:c1", "t1:assistant"]
    assert [r.status for r in (r1, r2, r3, r4)] == ["inserted"] * 4
    assert r1.seq < r2.seq < r3.seq < r4.seq


async def test_repeat_is_duplicate_and_stores_once(store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    first = await store.append("acme", sid, "t1", "user", "hi")
    again = await store.append("acme", sid, "t1", "user", "hi")
    assert again.status == "duplicate" and again.seq == first.seq and again.key == first.key
    assert await store.messages.count_documents({"session_id": sid}) == 1


@pytest.mark.parametrize(
    ("role", "call_id"), [("user", None), ("tool", "c1"), ("assistant", "c1"), ("assistant", None)]
)
async def test_same_key_other_content_is_a_conflict_and_writes_nothing(
    store: MemoryStore, role: str, call_id: str | None
) -> None:
    """Issue 8.6: a key repeated with different content is never a silent duplicate."""
    sid = await store.create_session("acme")
    first = await store.append("acme", sid, "t1", role, "original", call_id)
    with pytest.raises(Conflict, match=f"{first.key}.*already stored with different content"):
        await store.append("acme", sid, "t1", role, "something else", call_id)
    ctx = await store.load_context("acme", sid)
    stored = [d async for d in store.messages.find({"session_id": sid})]
    assert [d["content"] for d in stored] == ["original"]
    assert ctx.messages == [] or [m.content for m in ctx.messages] == ["original"]
    session = await store.sessions.find_one({"_id": sid})
    assert session is not None and not session.get("pending")


async def test_two_turns_at_once_keep_all_four_messages(store: MemoryStore) -> None:
    """The lost-update race of the one-document-per-chat design cannot happen."""
    sid = await store.create_session("acme")

    async def turn(t: str) -> None:
        await store.append("acme", sid, t, "user", f"question {t}")
        await store.append("acme", sid, t, "assistant", f"answer {t}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn, "a")
        tg.start_soon(turn, "b")
    ctx = await store.load_context("acme", sid)
    assert sorted(m.content for m in ctx.messages) == ["answer a", "answer b", "question a", "question b"]


@stress((4, 10), (16, 50), "threads,keys")
def test_threads_sending_every_key_twice_get_distinct_seqs(
    engine_uri: str, db_name: str, threads: int, keys: int
) -> None:
    """Real threads, each with its own client and event loop, racing on one session
    (16 threads of 50 keys in make soak, 4 of 10 in make test)."""
    settings = MemorySettings()

    async def setup() -> str:
        async with AsyncMongoClient[dict[str, Any]](engine_uri) as c:
            s = MemoryStore(c[db_name], settings)
            await s.ensure_indexes()
            return await s.create_session("acme")

    sid = anyio.run(setup)
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def worker(w: int) -> None:
        async def run() -> None:
            async with AsyncMongoClient[dict[str, Any]](engine_uri) as c:
                s = MemoryStore(c[db_name], settings)
                barrier.wait()
                for i in range(keys):
                    for _ in range(2):  # every key is sent twice
                        await s.append("acme", sid, f"w{w}-t{i}", "user", f"m {w} {i}")

        try:
            anyio.run(run)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    workers = [threading.Thread(target=worker, args=(w,)) for w in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not errors

    async def check() -> tuple[int, int]:
        async with AsyncMongoClient[dict[str, Any]](engine_uri) as c:
            docs = await c[db_name]["messages"].find({"session_id": sid}, {"seq": 1}).to_list()
            return len(docs), len({d["seq"] for d in docs})

    count, distinct = anyio.run(check)
    assert (count, distinct) == (threads * keys, threads * keys)


async def test_window_starts_at_a_user_message(store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    await store.append("acme", sid, "t1", "user", "q1")
    await store.append("acme", sid, "t1", "assistant", "call", "c1")
    await store.append("acme", sid, "t1", "tool", "result", "c1")
    await store.append("acme", sid, "t1", "assistant", "a1")
    await store.append("acme", sid, "t2", "user", "q2")
    await store.append("acme", sid, "t2", "assistant", "a2")
    # The last 4 messages would start with t1's tool result; the window starts at t2's user message.
    ctx = await store.load_context("acme", sid, 4)
    assert [(m.role, m.turn_id) for m in ctx.messages] == [("user", "t2"), ("assistant", "t2")]
    assert ctx.truncated
    whole = await store.load_context("acme", sid, 10)
    assert len(whole.messages) == 6 and not whole.truncated
    exact = await store.load_context("acme", sid, 6)
    assert len(exact.messages) == 6 and not exact.truncated


async def test_indexes_exist(store: MemoryStore) -> None:
    info = await store.messages.index_information()
    # uniqueness is the derived _id (tests/memory/test_keyed_ids.py): no other unique index
    assert [name for name, i in info.items() if i.get("unique")] in ([], ["_id_"])
    assert info["session_seq_desc"]["key"] == [("session_id", 1), ("seq", -1)]
    await store.ensure_indexes()  # idempotent


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"role": "robot"}, "role 'robot' is unknown"),
        ({"turn_id": ""}, "turn_id must be a non-empty string"),
        ({"turn_id": "x" * 201}, "maximum is 200"),
        ({"turn_id": "a:b"}, "may not contain ':'"),
        ({"role": "tool"}, "needs the call_id"),
        ({"role": "user", "call_id": "c1"}, "takes no call_id"),
        ({"content": "x" * 4097}, "the maximum is 4096"),
        ({"content": 12}, "content must be a string"),
    ],
)
async def test_bad_input_is_refused_and_writes_nothing(
    store: MemoryStore, kwargs: dict[str, Any], fragment: str
) -> None:
    sid = await store.create_session("acme")
    args: dict[str, Any] = {"turn_id": "t1", "role": "user", "content": "hi", "call_id": None} | kwargs
    with pytest.raises(InvalidInput, match=fragment):
        await store.append("acme", sid, args["turn_id"], args["role"], args["content"], args["call_id"])
    assert await store.messages.count_documents({}) == 0
    assert (await store.sessions.find_one({"_id": sid}))["next_seq"] == 0  # type: ignore[index]


@pytest.mark.parametrize("limit", [0, -1, 51, "10", True])
async def test_limit_out_of_range(store: MemoryStore, limit: object) -> None:
    sid = await store.create_session("acme")
    with pytest.raises(InvalidInput, match="limit must be an integer from 1 to 50"):
        await store.load_context("acme", sid, limit)


async def test_unknown_session_and_other_tenant_look_the_same(store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    await store.append("acme", sid, "t1", "user", "secret")
    errors = []
    for tenant, session in (("globex", sid), ("acme", "no-such-session")):
        with pytest.raises(NotFound) as e:
            await store.load_context(tenant, session)
        errors.append(str(e.value).replace(session, "<id>"))
        with pytest.raises(NotFound):
            await store.append(tenant, session, "t9", "user", "intrusion")
    assert errors[0] == errors[1]
    assert await store.messages.count_documents({"session_id": sid}) == 1


@asynccontextmanager
async def listened_store(
    engine_uri: str, db_name: str, listener: monitoring.CommandListener
) -> AsyncIterator[MemoryStore]:
    """A store (indexes made) on a client of its own whose commands `listener` sees."""
    async with AsyncMongoClient[dict[str, Any]](engine_uri, tz_aware=True, event_listeners=[listener]) as c:
        store = MemoryStore(c[db_name], MemorySettings())
        await store.ensure_indexes()
        yield store


class Commands(monitoring.CommandListener):
    """Counts the commands the driver sends (not the handshake or monitoring)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in ("hello", "isMaster", "ismaster", "ping", "endSessions"):
            self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def test_round_trips_append_two_load_context_two(engine_uri: str, db_name: str) -> None:
    """Issue 13.5: append is $inc + insert; a repeat adds one read; load_context is two finds (the
    newest summary, issue 29, then the window)."""
    listener = Commands()
    async with AsyncMongoClient[dict[str, Any]](engine_uri, tz_aware=True, event_listeners=[listener]) as c:
        s = MemoryStore(c[db_name], MemorySettings())
        await s.ensure_indexes()
        sid = await s.create_session("acme")

        listener.names.clear()
        await s.append("acme", sid, "t1", "user", "hi")
        assert listener.names == ["findAndModify", *BRACKETED]

        listener.names.clear()
        assert (await s.append("acme", sid, "t1", "user", "hi")).status == "duplicate"
        assert len(listener.names) <= 5  # the insert bracketed, then a read

        listener.names.clear()
        ctx = await s.load_context("acme", sid)
        assert [m.content for m in ctx.messages] == ["hi"] and listener.names == ["find", "find"]

        empty = await s.create_session("acme")
        listener.names.clear()
        assert (await s.load_context("acme", empty)).messages == []
        assert listener.names == ["find", "find", "find"]  # only an empty window looks the session up


async def test_concurrent_final_answers_of_different_turns_all_land(engine_uri: str, db_name: str) -> None:
    """Plain appends of final answers commit on the session document: they must not block each other."""
    clients = [AsyncMongoClient[dict[str, Any]](engine_uri, tz_aware=True) for _ in range(8)]
    try:
        stores = [MemoryStore(c[db_name], MemorySettings()) for c in clients]
        await stores[0].ensure_indexes()
        sid = await stores[0].create_session("acme")

        async def answer(i: int) -> None:
            for j in range(3):
                await stores[i].append("acme", sid, f"t{i}-{j}", "assistant", f"answer {i}-{j}")

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(answer, i)
        docs = [d async for d in stores[0].messages.find({"session_id": sid})]
        assert len(docs) == 24 and len({d["seq"] for d in docs}) == 24
        session = await stores[0].sessions.find_one({"_id": sid})
        assert session is not None and not session.get("pending")
    finally:
        for c in clients:
            await c.close()
