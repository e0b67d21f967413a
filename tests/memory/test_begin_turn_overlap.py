"""Issue 19.5: a retry of a turn that overlaps an attempt still running never makes a client give up.

The earlier attempt is fenced by the retry (the retry takes the lease over). Since the take
numbers the user message in the same update (docs/decisions/turn-write-path.md), an earlier
attempt overlapped after its take returns a lease that is already fenced: its end_turn answers
lease_lost and stores nothing, and the retry's lands. One interleaving is forced with a failpoint
(the earlier attempt waits between taking the lease and storing the user message until the retry
has taken the lease); then three real clients race the same turn through MCP, each following the
error protocol.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mongogate.errors import LeaseLost
from mongogate.memory.store import MemoryStore
from mongogate.memory.turns import Turns
from mongogate.server.app import build_server
from mongogate.tools.base import error_text
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio


async def test_attempt_overlapped_by_a_retry_of_its_turn_is_fenced(turns: Turns, store: MemoryStore) -> None:
    sid = await store.create_session("acme")
    paused, resume = anyio.Event(), anyio.Event()
    real_insert = store.insert_turn
    seen: list[str] = []

    async def held_insert(*args: Any, **kwargs: Any) -> Any:
        if not resume.is_set():  # only the first attempt is held at the failpoint
            paused.set()
            await resume.wait()
        return await real_insert(*args, **kwargs)

    async def first() -> None:
        start = await turns.begin_turn("acme", sid, "t1", "hello")
        assert start.lease_id
        seen.append(start.lease_id)

    leases_taken = 0

    def fault(at: str) -> None:
        nonlocal leases_taken
        if at == "begin_turn.after_lease":
            leases_taken += 1
            if leases_taken == 2:  # the retry's take is acknowledged: now let the first one go on
                resume.set()

    store.insert_turn = held_insert  # type: ignore[method-assign]
    store.fault = fault
    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await paused.wait()  # the first attempt holds the lease, its user message not yet stored
        retry = await turns.begin_turn("acme", sid, "t1", "hello")  # takes the lease over
    store.fault = None
    assert retry.lease_id and not retry.answered and len(seen) == 1
    with pytest.raises(LeaseLost) as lost:  # the overlapped attempt's lease is fenced
        await turns.end_turn("acme", sid, "t1", seen[0], "stale")
    assert "begin_turn again" in error_text(lost.value)
    assert [m.content for m in retry.messages] == ["hello"]
    await turns.end_turn("acme", sid, "t1", retry.lease_id, "hi")
    contents = [d["content"] async for d in store.messages.find({"session_id": sid}, sort=[("seq", 1)])]
    assert contents == ["hello", "hi"]


ROUNDS = 12


async def test_three_concurrent_begin_turns_of_one_turn_all_end_in_success(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Three clients (three servers' worth of connections) send the same turn at the same moment,
    12 times; each retries only what is marked (retryable). None may get a final error."""
    settings = make_settings(engine_uri, db_name, tmp_path)
    outcomes: Counter[str] = Counter()
    async with (
        Client(build_server(settings)) as a,
        Client(build_server(settings)) as b,
        Client(build_server(settings)) as c,
    ):
        created = await a.call_tool("create_session", {})
        assert created.structured_content is not None
        sid = created.structured_content["session_id"]
        for i in range(ROUNDS):
            go = anyio.Event()
            leases: list[str] = []

            async def client(
                cl: Client, i: int = i, go: anyio.Event = go, leases: list[str] = leases
            ) -> None:
                await go.wait()
                for _ in range(20):  # bounded: a client that follows the protocol
                    r = await cl.call_tool("begin_turn", {"session_id": sid, "turn_id": f"t{i}", "text": "q"})
                    if not r.is_error:
                        outcomes["ok"] += 1
                        data = r.structured_content or {}
                        if data.get("lease_id"):
                            leases.append(data["lease_id"])
                        return
                    text = r.content[0].text  # type: ignore[union-attr]
                    outcomes[text.split(" ", 1)[0] + (" retryable" if "(retryable)" in text else "")] += 1
                    assert "(retryable)" in text, text  # a final error: the client would give up
                    await anyio.sleep(0)
                raise AssertionError("a client kept being refused")

            async with anyio.create_task_group() as tg:
                for cl in (a, b, c):
                    tg.start_soon(client, cl)
                go.set()
            # Whoever owns the turn now ends it; every other lease is fenced.
            ended = 0
            for lid in leases:
                r = await a.call_tool(
                    "end_turn", {"session_id": sid, "turn_id": f"t{i}", "lease_id": lid, "reply": f"a{i}"}
                )
                ended += not r.is_error
            assert ended == 1, leases
    assert outcomes["ok"] == 3 * ROUNDS, outcomes
