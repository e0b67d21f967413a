"""Progress of a long call, reported to the client that asked for it (MCP `notifications/progress`).

The work that can take seconds (a scope's recall index read whole, a large window of messages
read in batches, a completion index built) calls `step` as it goes; it knows nothing of MCP. The
server (server/observe.py) opens a `Reporter` around each request, sending through the SDK's
`report_progress`, which reaches only a client that asked (a `_meta.progressToken`, or an
in-process callback) and is a no-op otherwise; outside a request `step` is one context-variable
read and returns.

A reporter is rate-limited by the injectable clock (mongogate.clock): the first step goes out,
then at most one every `INTERVAL`, and `finish` sends the last one unless the last step sent
already said the same. A failure to send is logged and never fails the work.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mongogate.clock import SYSTEM_CLOCK, Clock

__all__ = ["INTERVAL", "Reporter", "Send", "reporting", "step"]

log = logging.getLogger(__name__)

#: at most one notification this often (the first and the last always go out)
INTERVAL = timedelta(milliseconds=500)

#: sends one notification: progress (grows), total (None: unknown), message
Send = Callable[[float, float | None, str | None], Awaitable[None]]


@dataclass
class Reporter:
    """One request's progress: what was sent last and when."""

    send: Send
    clock: Clock = SYSTEM_CLOCK
    interval: timedelta = INTERVAL
    #: notifications sent (tests and the log read it)
    sent: int = 0
    _last_at: datetime | None = None
    _last: tuple[float, float | None, str | None] | None = field(default=None, repr=False)
    _pending: tuple[float, float | None, str | None] | None = field(default=None, repr=False)
    _done: float = 0.0

    async def step(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """`done` of `total` (None: unknown); sent now, or kept for `finish` when one went out
        less than `interval` ago. Progress never goes back (the spec: it must increase)."""
        done = max(done, self._done)
        self._done = done
        if self._last is not None and done <= self._last[0]:
            return  # nothing new to say
        now = self.clock.now()
        if self._last_at is not None and now - self._last_at < self.interval:
            self._pending = (done, total, message)
            return
        await self._send((done, total, message), now)

    async def finish(self) -> None:
        """The last step not yet sent, if any (a client sees where the work ended)."""
        if self._pending is not None and (self._last is None or self._pending[0] > self._last[0]):
            await self._send(self._pending, self.clock.now())

    async def _send(self, value: tuple[float, float | None, str | None], now: datetime) -> None:
        self._pending = None
        self._last, self._last_at = value, now
        try:
            await self.send(*value)
        except Exception as e:  # the client went away: the work goes on
            log.debug("progress not sent: %s", type(e).__name__)
            return
        self.sent += 1


_current: ContextVar[Reporter | None] = ContextVar("mongogate_progress", default=None)


@contextlib.contextmanager
def reporting(reporter: Reporter) -> Iterator[Reporter]:
    """`step` inside this block (and the tasks it starts) reports to `reporter`; the caller
    awaits `reporter.finish()` when the work ends."""
    token = _current.set(reporter)
    try:
        yield reporter
    finally:
        _current.reset(token)


async def step(done: float, total: float | None = None, message: str | None = None) -> None:
    """Report progress to the client that asked for it; nothing when none did."""
    reporter = _current.get()
    if reporter is not None:
        await reporter.step(done, total, message)
