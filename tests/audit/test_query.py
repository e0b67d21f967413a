"""One AuditQuery, two readers: the file and `audit_events` answer the same question the same."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from mongogate.audit.query import AuditQuery
from mongogate.audit.read import read_events
from mongogate.audit.store import COLLECTION, read_events_db
from tests.audit.test_audit_sink import _log, _reject

NOW = datetime.now(UTC)

QUERIES = [
    pytest.param(AuditQuery(), ["r1", "r2", "r3"], id="everything"),
    pytest.param(AuditQuery(tenant="beta"), ["r2"], id="tenant"),
    pytest.param(AuditQuery(reason="operator_not_allowed"), ["r1", "r3"], id="reason"),
    pytest.param(AuditQuery(tenant="acme", reason="too_deep"), [], id="two-fields-none-match"),
    pytest.param(AuditQuery(since=NOW - timedelta(hours=1)), ["r1", "r2", "r3"], id="since"),
    pytest.param(AuditQuery(until=NOW - timedelta(hours=1)), [], id="until"),
    pytest.param(
        AuditQuery(since=(NOW - timedelta(hours=1)).replace(tzinfo=None)),
        ["r1", "r2", "r3"],
        id="naive-since-is-utc",
    ),
    pytest.param(AuditQuery(instance="srv-9"), [], id="another-instance"),
]


@pytest.fixture(scope="module")
def both(engine_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    """Three events written once to both sinks (sink = "both")."""
    path = tmp_path_factory.mktemp("q") / "a.jsonl"
    db = f"audit_query_{NOW.timestamp():.0f}"
    log = _log(path, engine_uri, db, sink="both", instance="srv-1")
    _reject(log, "r1")
    _reject(log, "r2", tenant="beta", reason="too_deep")
    _reject(log, "r3")
    log.close()
    client: MongoClient[dict[str, Any]] = MongoClient(engine_uri, tz_aware=True)
    yield path, client[db][COLLECTION]
    client.drop_database(db)
    client.close()


@pytest.mark.parametrize(("query", "expected"), QUERIES)
def test_the_file_and_the_collection_answer_a_query_the_same(
    both: tuple[Path, Any], query: AuditQuery, expected: list[str]
) -> None:
    path, coll = both
    assert [e["request_id"] for e in read_events(path, query)] == expected
    assert [e["request_id"] for e in read_events_db(coll, query)] == expected


def test_without_drops_only_the_named_filters() -> None:
    q = AuditQuery(tenant="acme", tool="t", since=NOW)
    assert q.without("tenant") == AuditQuery(tool="t", since=NOW)
    assert q.without("since", "tool").fields() == {"tenant": "acme"}
