"""One notion of time for leases, runs, turns and the scheduler, so tests can drive it.

Every time-dependent decision (lease expiry, deadlines, due ticks) reads `clock.now()`;
tests pass a `ManualClock` and move it explicitly instead of sleeping past a margin.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

import anyio


def truncate_ms(value: datetime) -> datetime:
    """BSON dates hold milliseconds: truncate so a value compares equal to what was stored."""
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def as_utc(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime. The driver may return naive datetimes
    (tz_aware=False): they are UTC; an aware one in another zone is converted."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utc_or_none(value: object) -> datetime | None:
    """A stored date as aware UTC; None when the field is unset (or holds something else)."""
    return as_utc(value) if isinstance(value, datetime) else None


def iso_z(value: datetime, timespec: str = "milliseconds") -> str:
    """``value`` as ISO 8601 UTC text ending in ``Z`` (audit events, JSON log lines)."""
    return as_utc(value).isoformat(timespec=timespec).replace("+00:00", "Z")


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC, truncated to milliseconds."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return truncate_ms(datetime.now(UTC))

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(seconds, 0.0))


SYSTEM_CLOCK: Clock = SystemClock()


class ManualClock:
    """A clock that moves only when told to (tests, soak scripts).

    `sleep` advances the clock by the requested amount and yields once, so a loop that
    sleeps between polls runs deterministically without real waiting.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = truncate_ms(as_utc(start or datetime(2030, 1, 1, tzinfo=UTC)))

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float = 0.0, *, ms: int = 0) -> datetime:
        self._now = truncate_ms(self._now + timedelta(seconds=seconds, milliseconds=ms))
        return self._now

    def set(self, value: datetime) -> None:
        self._now = truncate_ms(as_utc(value))

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)
        await anyio.sleep(0)


class SkewedClock(SystemClock):
    """The system clock shifted by a fixed offset: a server whose clock runs ahead or behind.

    Used by crash/race tests and the soak script (`MONGOGATE_TEST_CLOCK_SKEW_MS`) to make one
    process see another's lease as expired at once, without waiting for it.
    """

    def __init__(self, offset_ms: int) -> None:
        self.offset = timedelta(milliseconds=offset_ms)

    def now(self) -> datetime:
        return truncate_ms(datetime.now(UTC) + self.offset)
