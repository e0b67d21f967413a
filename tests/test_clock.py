"""The one UTC coercion (`clock.as_utc`, `utc_or_none`) every stored date goes through."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from mongogate.clock import as_utc, iso_z, utc_or_none


def test_naive_dates_are_utc_and_aware_ones_are_converted() -> None:
    naive = datetime(2030, 1, 1, 12, 0)  # what the driver returns with tz_aware=False
    assert as_utc(naive) == datetime(2030, 1, 1, 12, 0, tzinfo=UTC) and as_utc(naive).tzinfo is UTC
    berlin = datetime(2030, 1, 1, 13, 0, tzinfo=timezone(timedelta(hours=1)))
    assert as_utc(berlin).tzinfo is UTC
    assert as_utc(berlin).isoformat() == "2030-01-01T12:00:00+00:00"
    assert iso_z(berlin) == "2030-01-01T12:00:00.000Z"


def test_an_unset_or_non_date_field_is_none() -> None:
    assert utc_or_none(None) is None
    assert utc_or_none("2030-01-01") is None
    assert utc_or_none(datetime(2030, 1, 1)) == datetime(2030, 1, 1, tzinfo=UTC)
