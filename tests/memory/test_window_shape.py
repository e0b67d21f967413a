"""Issue 20.5: what a too-small context window returns.

`load_context(limit=1)` on a session whose newest turn is longer than one message used to return
`[]` with `truncated: true`. Now the window widens back to that turn's user message: the newest
whole turn, `truncated` when older messages exist; a turn longer than `memory.max_context_limit`
gives its newest messages (the only case a window starts mid-turn).
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import LimitsSettings, MemorySettings
from mongogate.memory.model import message_shape
from mongogate.memory.store import MemoryStore, Message
from mongogate.values import RESPONSE_ENVELOPE, ByteBudget, json_size
from tests.memory.test_store import Commands, listened_store

pytestmark = pytest.mark.anyio


async def turn(store: MemoryStore, sid: str, tid: str, calls: int, *, answer: bool = True) -> None:
    await store.append("acme", sid, tid, "user", f"question {tid}")
    for c in range(calls):
        await store.append("acme", sid, tid, "assistant", f"call {c}", f"c{c}")
        await store.append("acme", sid, tid, "tool", f"result {c}", f"c{c}")
    if answer:
        await store.append("acme", sid, tid, "assistant", f"answer {tid}")


def shape(ctx_messages: list[Message]) -> list[tuple[str, str]]:
    return [(m.turn_id, m.role) for m in ctx_messages]


async def test_a_window_smaller_than_the_newest_turn_returns_that_whole_turn(store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    await turn(store, sid, "t1", 1)
    await turn(store, sid, "t2", 1, answer=False)  # in progress: user, call, result
    ctx = await store.load_context("acme", sid, 1)
    assert shape(ctx.messages) == [("t2", "user"), ("t2", "assistant"), ("t2", "tool")]
    assert ctx.truncated is True  # t1 exists before it
    ctx = await store.load_context("acme", sid, 2)
    assert shape(ctx.messages) == [("t2", "user"), ("t2", "assistant"), ("t2", "tool")]
    ctx = await store.load_context("acme", sid, 3)  # exactly the newest turn
    assert shape(ctx.messages)[0] == ("t2", "user") and len(ctx.messages) == 3 and ctx.truncated is True
    ctx = await store.load_context("acme", sid, 5)  # the window cuts into t1: it starts at t2's user
    assert shape(ctx.messages)[0] == ("t2", "user") and ctx.truncated is True
    ctx = await store.load_context("acme", sid, 40)
    assert len(ctx.messages) == 7 and ctx.truncated is False


async def test_only_turn_of_the_session_whole_and_not_truncated(store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    await turn(store, sid, "t1", 2)
    ctx = await store.load_context("acme", sid, 1)
    assert [m.role for m in ctx.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert ctx.truncated is False


async def test_a_turn_longer_than_max_context_limit_gives_its_newest_messages(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, clock: ManualClock
) -> None:
    store = MemoryStore(mongo[db_name], MemorySettings(max_context_limit=5), clock)
    await store.ensure_indexes()
    sid = await store.create_session("acme")
    await turn(store, sid, "t1", 4, answer=False)  # 9 messages
    ctx = await store.load_context("acme", sid, 1)
    assert [m.content for m in ctx.messages] == ["result 1", "call 2", "result 2", "call 3", "result 3"]
    assert ctx.truncated is True
    assert ctx.messages[0].role != "user"  # mid-turn: the documented exception


async def test_messages_without_any_user_message_are_returned(store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    await store.append("acme", sid, "t1", "system", "be brief")
    ctx = await store.load_context("acme", sid, 1)
    assert [m.content for m in ctx.messages] == ["be brief"] and ctx.truncated is False


async def test_with_the_default_cap_a_default_window_is_still_one_find(engine_uri: str, db_name: str) -> None:
    """Reading in bounded replies costs no extra round trip at the defaults (41 messages, 4 MiB cap):
    one find for the window, after the one for the newest summary (issue 29)."""
    listener = Commands()
    async with listened_store(engine_uri, db_name, listener) as store:
        sid = await store.create_session("acme")
        for i in range(21):
            await store.append("acme", sid, f"t{i}", "user", f"q{i}")
            await store.append("acme", sid, f"t{i}", "assistant", f"a{i}")
        listener.names.clear()
        ctx = await store.load_context("acme", sid, None, ByteBudget(LimitsSettings().max_response_bytes))
    assert len(ctx.messages) == 40 and listener.names == ["find", "find"]


async def test_window_invariants_over_many_shapes_limits_and_caps(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, clock: ManualClock
) -> None:
    """Every window, whatever the limit and cap, is a contiguous newest suffix of the session that
    fits the cap, starts at a user message unless the documented exceptions apply, and says
    `truncated` exactly when older messages exist. Two sessions: random turns, and the same with a
    last turn longer than `max_context_limit`."""
    rng = random.Random(19)
    settings = MemorySettings(max_message_bytes=32 * 1024, max_context_limit=12)
    store = MemoryStore(mongo[db_name], settings, clock)
    await store.ensure_indexes()
    kinds: Counter[tuple[bool, bool, bool]] = Counter()
    checked = 0
    for long_last_turn in (False, True):
        sid = await store.create_session("acme")
        for t in range(7):
            last = t == 6
            await store.append("acme", sid, f"t{t}", "user", "u" * rng.choice([10, 5_000, 30_000]))
            for c in range(8 if last and long_last_turn else rng.choice([0, 1, 3, 6])):
                await store.append("acme", sid, f"t{t}", "assistant", "c" * rng.choice([10, 20_000]), f"c{c}")
                await store.append("acme", sid, f"t{t}", "tool", "r" * rng.choice([10, 30_000]), f"c{c}")
            if not last or (not long_last_turn and rng.random() < 0.5):
                await store.append("acme", sid, f"t{t}", "assistant", "a" * rng.choice([10, 8_000]))
        everything = [d async for d in store.messages.find({"session_id": sid}, sort=[("seq", 1)])]
        seqs = [int(d["seq"]) for d in everything]
        roles = {int(d["seq"]): d["role"] for d in everything}
        sizes = {int(d["seq"]): json_size(message_shape(d)) + 1 for d in everything}
        for n in range(1, 13):
            for cap in (None, 70_000, 100_000, 160_000):
                budget = ByteBudget(cap + RESPONSE_ENVELOPE) if cap is not None else None
                ctx = await store.load_context("acme", sid, n, budget)
                got = [m.seq for m in ctx.messages]
                checked += 1
                where = (long_last_turn, n, cap, got)
                assert got, where  # the newest message always fits here
                kinds[(ctx.size_capped, roles[got[0]] == "user", len(got) > n)] += 1
                assert got == seqs[seqs.index(got[0]) :], where  # contiguous: nothing newer left out
                if cap is not None:
                    assert sum(sizes[s] for s in got) <= cap, where
                assert ctx.truncated == (got[0] != seqs[0]), where
                if roles[got[0]] != "user":  # only when the turn's start is out of reach
                    reach = seqs[-settings.max_context_limit :]
                    newest_user = max(s for s in seqs if roles[s] == "user")
                    assert ctx.size_capped or newest_user not in reach, where
                elif not ctx.size_capped:
                    users = [s for s in seqs[-n:] if roles[s] == "user"]
                    start = users[0] if users else max(s for s in seqs if roles[s] == "user")
                    assert got[0] == start, where
    assert checked == 96
    # the table covers each case: capped, mid-turn, and widened to the newest whole turn
    assert any(k[0] for k in kinds) and any(not k[1] for k in kinds) and kinds[(False, True, True)], kinds
