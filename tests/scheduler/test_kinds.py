"""Schedule kinds and misfire planning, without a database: cron in a named zone (croniter), one-off
times, fixed-rate intervals, and what a late claim runs, coalesces or skips."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mongogate.errors import ConfigError
from mongogate.scheduler.agents import Agent, TickContext
from mongogate.scheduler.kinds import At, Cron, Every
from mongogate.scheduler.slots import jitter_bound, plan
from tests.scheduler.helpers import T0, noop


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def test_cron_slots_are_wall_clock_times_in_the_agents_zone() -> None:
    paris = Cron("0 3 * * *", "Europe/Paris")
    # 03:00 in Paris is 02:00 UTC in winter, 01:00 UTC in summer
    assert paris.after(datetime(2030, 1, 10, 12, tzinfo=UTC)) == datetime(2030, 1, 11, 2, tzinfo=UTC)
    assert paris.after(datetime(2030, 7, 10, 12, tzinfo=UTC)) == datetime(2030, 7, 11, 1, tzinfo=UTC)
    # across the spring change (31 March 2030) the slot stays at 03:00 local
    assert paris.after(datetime(2030, 3, 30, 12, tzinfo=UTC)) == datetime(2030, 3, 31, 1, tzinfo=UTC)
    every5 = Cron("*/5 * * * *", "UTC")
    assert every5.first(datetime(2030, 1, 1, 0, 5, tzinfo=UTC)) == datetime(2030, 1, 1, 0, 5, tzinfo=UTC)
    assert every5.first(datetime(2030, 1, 1, 0, 5, 1, tzinfo=UTC)) == datetime(2030, 1, 1, 0, 10, tzinfo=UTC)
    assert every5.newest(T0, T0 + s(17 * 60)) == (T0 + s(15 * 60), 3)


def test_one_off_times_and_intervals_share_the_same_questions() -> None:
    at = At((T0, T0 + s(60)))
    assert at.after(T0) == T0 + s(60) and at.after(T0 + s(60)) is None
    assert at.newest(T0, T0 + s(90)) == (T0 + s(60), 1)
    every = Every(2.0)
    assert every.after(T0) == T0 + s(2) and every.newest(T0, T0 + s(7.5)) == (T0 + s(6), 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one schedule"),
        ({"poll_interval_s": 5, "cron": "* * * * *", "tz": "UTC"}, "exactly one schedule"),
        ({"cron": "* * * * *"}, "explicit time zone"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "not an IANA zone"),
        ({"cron": "0 3 * * * 2030", "tz": "UTC"}, "five fields"),
        ({"cron": "61 * * * *", "tz": "UTC"}, "not a valid cron"),
        ({"poll_interval_s": 5, "tz": "UTC"}, "tz= goes with cron"),
        ({"at": datetime(2030, 1, 1)}, "timezone-aware"),
        ({"at": []}, "1 to 1000 datetimes"),
        ({"poll_interval_s": 0}, "positive number"),
        ({"poll_interval_s": 5, "misfire_grace_s": 0}, "misfire_grace_s"),
        ({"poll_interval_s": 5, "max_running": 0}, "max_running"),
    ],
)
def test_bad_schedules_are_refused_with_what_would_work(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Agent("a", noop, **kwargs)


def test_blocking_ticks_are_plain_functions_and_async_ticks_are_not() -> None:
    def blocking(ctx: TickContext) -> None:
        return None

    assert Agent("b", blocking, 5, blocking=True).blocking
    with pytest.raises(ConfigError, match="declare blocking=True"):
        Agent("b", blocking, 5)
    with pytest.raises(ConfigError, match="not async"):
        Agent("b", noop, 5, blocking=True)


def test_coalesce_runs_once_and_the_grace_is_measured_from_the_newest_slot() -> None:
    every = Every(2.0)
    # slots 0, 2, 4, 6 are due at 7.5: one run answers 0, 2-6 are counted
    assert plan(every, T0, T0 + s(7.5), coalesce=True, grace_s=None) == plan(every, T0, T0 + s(7.5), True, 5)
    p = plan(every, T0, T0 + s(7.5), coalesce=True, grace_s=None)
    assert (p.run, p.next, p.missed, p.misfired) == (T0, T0 + s(8), 3, 0)
    # 1.5 s past the newest slot (6) with a 1 s grace: nothing runs, all four slots are counted
    p = plan(every, T0, T0 + s(7.5), coalesce=True, grace_s=1)
    assert (p.run, p.next, p.missed, p.misfired) == (None, T0 + s(8), 4, 1)


def test_without_coalescing_each_slot_runs_unless_it_is_past_the_grace() -> None:
    every = Every(2.0)
    p = plan(every, T0, T0 + s(7.5), coalesce=False, grace_s=None)
    assert (p.run, p.next, p.missed) == (T0, T0 + s(2), 0)
    p = plan(every, T0, T0 + s(7.5), coalesce=False, grace_s=2)  # 0, 2 and 4 are too late; 6 runs
    assert (p.run, p.next, p.missed, p.misfired) == (T0 + s(6), T0 + s(8), 3, 3)


def test_jitter_never_reaches_the_next_slot_or_the_grace() -> None:
    every = Every(2.0)
    # overdue by 1.5 s: the next slot is 0.5 s away, so a restart may delay it less than that
    assert jitter_bound(60, every, T0 - s(1.5), T0, None) == pytest.approx(0.499)
    assert jitter_bound(60, every, T0 - s(1.5), T0, grace_s=1.7) == pytest.approx(0.2)
    assert jitter_bound(0.1, every, T0 - s(1.5), T0, None) == pytest.approx(0.1)
    assert jitter_bound(60, At((T0 - s(1),)), T0 - s(1), T0, None) == 60  # no next slot


@given(
    interval_ms=st.integers(1, 10_000_000),
    late_ms=st.integers(0, 100_000_000),
    grace_ms=st.one_of(st.none(), st.integers(1, 10_000_000)),
    coalesce=st.booleans(),
)
def test_every_due_slot_is_run_or_counted_exactly_once(
    interval_ms: int, late_ms: int, grace_ms: int | None, coalesce: bool
) -> None:
    """Between the oldest unanswered slot and the next one a claim leaves, every slot is either
    the one that runs or counted as missed, never both, never neither; the next slot is ahead."""
    every = Every(interval_ms / 1000)
    now = T0 + timedelta(milliseconds=late_ms)
    p = plan(every, T0, now, coalesce, None if grace_ms is None else grace_ms / 1000)
    assert (p.next is not None and p.next > now) or (not coalesce and p.run is not None)
    end = p.next if p.next is not None else now
    covered = (end - T0) // timedelta(milliseconds=interval_ms)
    assert covered == p.missed + (p.run is not None)
    if p.run is not None:
        assert T0 <= p.run <= now and (
            grace_ms is None or coalesce or now - p.run <= timedelta(milliseconds=grace_ms)
        )
    assert 0 <= p.misfired <= p.missed
