"""Schedule kinds: a fixed interval, a five-field cron expression in a named time zone, one-off runs.

Every kind answers the same three questions, so claims, catch-up, misfire rules and jitter are
written once (`slots`): the first slot at registration, the slot after a given slot, and the
newest slot at or before now (with how many slots lie between). Slots are UTC datetimes in
whole milliseconds (what BSON dates hold).

Cron expressions are parsed and iterated by ``croniter`` (a maintained library; hand-parsing
cron's ranges, steps, names and day-of-month/day-of-week rules is where bugs live). The zone
is always explicit: a daily ``0 3 * * *`` means 03:00 where the operator is, and croniter
follows that zone's daylight-saving changes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from mongogate.clock import as_utc, truncate_ms
from mongogate.errors import ConfigError

Kind = Literal["every", "cron", "at"]

#: slots counted one by one when a cron schedule is behind; beyond this the count is a floor
MAX_COUNTED = 1000
#: one-off times per agent
MAX_AT = 1000
_MS = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def stable_offset_s(key: str, interval_s: float) -> float:
    """A per-agent phase in [0, interval) from a hash of its key (sha256: the same in every
    process and release, unlike `hash()`), in whole milliseconds."""
    period = int(step(interval_s) / _MS)
    digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return (digest % period) / 1000


def step(interval_s: float) -> timedelta:
    """The interval in whole milliseconds (what BSON dates hold), so slots add up exactly."""
    return timedelta(milliseconds=max(1, round(interval_s * 1000)))


@dataclass(frozen=True)
class Every:
    """Fixed rate: slot k is ``first + k * interval`` (never claim time plus interval)."""

    seconds: float
    kind: Kind = "every"

    @property
    def spec(self) -> str:
        return f"every {self.seconds:g}s"

    def first(self, now: datetime) -> datetime:
        return now

    def first_at_offset(self, now: datetime, offset_s: float) -> datetime:
        """The first slot at or after `now` on the grid ``epoch + offset_s + k * interval``:
        the same phase of the interval for this agent whatever the worker and whenever it starts."""
        period = int(step(self.seconds) / _MS)
        phase = round(offset_s * 1000) % period
        now_ms = math.ceil((now - _EPOCH) / _MS)
        k = math.ceil((now_ms - phase) / period)
        return _EPOCH + timedelta(milliseconds=k * period + phase)

    def after(self, slot: datetime) -> datetime | None:
        return slot + step(self.seconds)

    def newest(self, slot: datetime, now: datetime) -> tuple[datetime, int]:
        """The newest slot <= now on `slot`'s grid, and how many slots after `slot` that is."""
        if now < slot:
            return slot, 0
        passed = (now - slot) // step(self.seconds)
        return slot + passed * step(self.seconds), passed


@dataclass(frozen=True)
class Cron:
    """A five-field cron expression evaluated in `tz` (an IANA zone name such as "Europe/Paris")."""

    expr: str
    tz: str
    kind: Kind = "cron"

    def __post_init__(self) -> None:
        fields = self.expr.split()
        if len(fields) != 5:
            raise ConfigError(
                f"cron {self.expr!r} must have five fields (minute hour day-of-month month day-of-week), "
                "for example '*/5 * * * *'"
            )
        try:
            self.zone()
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise ConfigError(f"cron time zone {self.tz!r} is not an IANA zone name (e.g. 'UTC')") from e
        if not croniter.is_valid(self.expr):
            raise ConfigError(f"cron {self.expr!r} is not a valid cron expression")

    @property
    def spec(self) -> str:
        return f"cron {' '.join(self.expr.split())} {self.tz}"

    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    def _iter(self, start: datetime) -> croniter:
        return croniter(self.expr, start.astimezone(self.zone()))

    def after(self, slot: datetime) -> datetime | None:
        try:
            nxt = self._iter(slot).get_next(datetime)
        except (CroniterBadDateError, CroniterBadCronError):
            return None  # e.g. "0 0 30 2 *": no such date, ever
        return truncate_ms(as_utc(nxt))

    def first(self, now: datetime) -> datetime:
        """The first slot at or after now: a new cron agent waits for its time, it does not run at once."""
        return self.after(now - _MS) or now

    def newest(self, slot: datetime, now: datetime) -> tuple[datetime, int]:
        if now < slot:
            return slot, 0
        it = self._iter(slot)
        newest, passed = slot, 0
        while passed < MAX_COUNTED:
            nxt = truncate_ms(as_utc(it.get_next(datetime)))
            if nxt > now:
                return newest, passed
            newest, passed = nxt, passed + 1
        # far behind (a minutely schedule after a long outage): jump to the newest slot, count a floor
        prev = truncate_ms(as_utc(self._iter(now + _MS).get_prev(datetime)))
        return max(prev, newest), passed


@dataclass(frozen=True)
class At:
    """One-off runs at given times (timezone-aware); after the last one the schedule is done."""

    times: tuple[datetime, ...]
    kind: Kind = "at"

    @property
    def spec(self) -> str:
        return "at " + ",".join(t.isoformat(timespec="milliseconds") for t in self.times)

    def first(self, now: datetime) -> datetime:
        return self.times[0]

    def after(self, slot: datetime) -> datetime | None:
        return next((t for t in self.times if t > slot), None)

    def newest(self, slot: datetime, now: datetime) -> tuple[datetime, int]:
        due = [t for t in self.times if slot < t <= now]
        return (due[-1], len(due)) if due else (slot, 0)


Schedule = Every | Cron | At


def make_schedule(
    key: str, every: float | None, cron: str | None, tz: str | None, at: datetime | Sequence[datetime] | None
) -> Schedule:
    """Exactly one of `every`, `cron` (with `tz`) or `at`; a clear error for anything else."""
    given = [name for name, v in (("every", every), ("cron", cron), ("at", at)) if v is not None]
    if len(given) != 1:
        raise ConfigError(
            f"agent {key!r}: give exactly one schedule: every=SECONDS, cron='EXPR' with tz='ZONE', "
            f"or at=DATETIME (got {', '.join(given) or 'none'})"
        )
    if tz is not None and cron is None:
        raise ConfigError(f"agent {key!r}: tz= goes with cron= only")
    if every is not None:
        return _every(key, every)
    if cron is not None:
        return _cron(key, cron, tz)
    return _at(key, at)


def _every(key: str, every: float) -> Every:
    if isinstance(every, bool) or not isinstance(every, int | float) or not 0 < every < math.inf:
        raise ConfigError(f"agent {key!r}: poll_interval_s must be a positive number of seconds")
    return Every(float(every))


def _cron(key: str, cron: str, tz: str | None) -> Cron:
    if not isinstance(cron, str) or not tz:
        raise ConfigError(
            f"agent {key!r}: cron= needs an explicit time zone, e.g. tz='UTC' or tz='Europe/Paris'"
        )
    try:
        return Cron(cron, tz)
    except ConfigError as e:
        raise ConfigError(f"agent {key!r}: {e}") from e


def _at(key: str, at: datetime | Sequence[datetime] | None) -> At:
    times = [at] if isinstance(at, datetime) else list(at or ())
    if not times or len(times) > MAX_AT or not all(isinstance(t, datetime) for t in times):
        raise ConfigError(f"agent {key!r}: at= takes a datetime or a list of 1 to {MAX_AT} datetimes")
    if any(t.tzinfo is None for t in times):
        raise ConfigError(f"agent {key!r}: at= times must be timezone-aware (e.g. datetime(..., tzinfo=UTC))")
    return At(tuple(sorted({truncate_ms(as_utc(t)) for t in times})))
