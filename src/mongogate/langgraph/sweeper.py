"""The TTL sweeper of `MongogateStore`: a task on the store's bridge loop that erases the expired
memories every interval of the store's clock (`clock.sleep`: a test's clock drives it without
waiting), until stopped. A failed round is logged and the next one tries again, as LangGraph's
own stores' sweepers do."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable

from mongogate.bridge import Bridge
from mongogate.clock import Clock

log = logging.getLogger(__name__)


class Sweeper:
    """Runs `sweep` every `seconds` of `clock` on the bridge's loop, one task at a time."""

    def __init__(self, bridge: Bridge, clock: Clock, sweep: Callable[[], Awaitable[int]]) -> None:
        self._bridge = bridge
        self._clock = clock
        self._sweep = sweep
        self._task: asyncio.Task[None] | None = None

    def start(self, seconds: float) -> concurrent.futures.Future[None]:
        """Start (or keep) the task; the future ends when it stops, and cancelling it stops it."""
        return self._bridge.call(self._launch(seconds))

    async def _launch(self, seconds: float) -> concurrent.futures.Future[None]:
        """On the bridge's loop: the task (a new one unless it runs) and a future tied to it."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._rounds(seconds))
        task = self._task
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def ended(_: object) -> None:
            if not done.done():
                done.set_result(None)

        def cancelled(f: concurrent.futures.Future[None]) -> None:
            if f.cancelled():
                self._bridge.spawn(_cancelled(task))

        task.add_done_callback(ended)
        done.add_done_callback(cancelled)
        return done

    def stop(self, timeout: float | None = None) -> bool:
        """Cancel the task; False when it had not ended within `timeout` seconds."""
        task, self._task = self._task, None
        if task is None or task.done():
            return True
        return self._bridge.call(_halted(task, timeout))

    async def _rounds(self, seconds: float) -> None:
        while True:
            await self._clock.sleep(seconds)
            try:
                n = await self._sweep()
            except Exception:  # the store's errors and the driver's alike: the next round retries
                log.warning("store TTL sweep failed", exc_info=True)
            else:
                if n:
                    log.info("store TTL sweep erased %d expired items", n)


async def _cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()


async def _halted(task: asyncio.Task[None], timeout: float | None) -> bool:
    task.cancel()
    _, pending = await asyncio.wait({task}, timeout=timeout)
    return not pending
