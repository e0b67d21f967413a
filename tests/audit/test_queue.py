"""The one background queue of both audit sinks: a failing sink never strands its waiters."""

from __future__ import annotations

import asyncio
import threading

from mongogate.audit.queue import BackgroundQueue


def test_a_batch_the_sink_cannot_handle_costs_that_batch_not_the_queue() -> None:
    got: list[int] = []

    def handle(batch: list[int]) -> None:
        if 0 in batch:
            raise RuntimeError("sink broke")
        got.extend(batch)

    q: BackgroundQueue[int] = BackgroundQueue("test-audit-queue", handle)
    q.submit(0)  # returns (once handled) although the sink raised
    q.submit(1)
    q.close()
    assert got == [1] and not q.running


def test_synced_waits_on_the_loop_for_what_was_queued_and_close_restarts_later() -> None:
    release = threading.Event()
    seen: list[str] = []
    stopped: list[int] = []

    def handle(batch: list[str]) -> None:
        release.wait()
        seen.extend(batch)

    q: BackgroundQueue[str] = BackgroundQueue("test-audit-queue", handle, stopped=lambda: stopped.append(1))

    async def main() -> None:
        q.submit("a")  # inside a loop: queued, not waited for
        assert seen == []
        release.set()
        await q.synced()
        assert seen == ["a"]

    asyncio.run(main())
    q.close()
    assert stopped == [1]
    q.submit("b")  # a later item starts the thread again
    q.close()
    assert seen == ["a", "b"] and stopped == [1, 1]
