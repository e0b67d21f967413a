"""The MongoDB audit sink: shared collection, indexes and TTL, file fallback (counted), follow."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from mongogate.audit.log import AuditLog
from mongogate.audit.mongo import MongoSink
from mongogate.audit.query import AuditQuery
from mongogate.audit.store import COLLECTION, TTL_INDEX, ensure_indexes, follow_db, read_events_db
from tests.helpers import free_port


@pytest.fixture
def client(engine_uri: str) -> Iterator[MongoClient[dict[str, Any]]]:
    c: MongoClient[dict[str, Any]] = MongoClient(engine_uri, tz_aware=True)
    try:
        yield c
    finally:
        c.close()


def _log(path: Path, uri: str, db: str, sink: str = "mongodb", **kw: Any) -> AuditLog:
    return AuditLog.for_database(
        path,
        uri=uri,
        db_name=db,
        sink=sink,  # type: ignore[arg-type]
        queue_size=kw.pop("queue_size", 100),
        timeout_ms=kw.pop("timeout_ms", 2000),
        retention_days=kw.pop("retention_days", 7),
        redact_values=False,
        max_value_chars=64,
        stream=None,
        **kw,
    )


def _reject(
    log: AuditLog, request_id: str, tenant: str = "acme", reason: str = "operator_not_allowed"
) -> None:
    log.filter_rejected(
        tool="find_orders",
        tenant=tenant,
        principal="p",
        reason=reason,
        path="filter.$where",
        filter={"$where": "sleep(1)", "a.b": {"$gt": 1}},
        request_id=request_id,
    )


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_events_land_once_in_the_collection_with_instance_and_indexes(
    engine_uri: str, db_name: str, tmp_path: Path, client: MongoClient[dict[str, Any]]
) -> None:
    log = _log(tmp_path / "a.jsonl", engine_uri, db_name, instance="srv-1")
    _reject(log, "r1")
    _reject(log, "r2", tenant="beta", reason="too_deep")
    log.close()
    coll = client[db_name][COLLECTION]
    events = list(read_events_db(coll))
    assert [e["request_id"] for e in events] == ["r1", "r2"]
    assert {e["instance"] for e in events} == {"srv-1"}
    assert events[0]["filter"] == {"$where": "sleep(1)", "a.b": {"$gt": 1}}  # `$` keys survive (as JSON)
    assert events[0]["offending"]["operator"] == "$where"
    assert isinstance(coll.find_one({})["ts"], datetime)  # type: ignore[index]  # a date: the TTL needs one
    assert [e["request_id"] for e in read_events_db(coll, AuditQuery(tenant="beta"))] == ["r2"]
    assert list(read_events_db(coll, AuditQuery(instance="other"))) == []
    indexes = {i["name"]: i for i in coll.list_indexes()}
    assert {"tenant_ts", "tool_ts", "reason_ts", "instance_ts", TTL_INDEX} <= set(indexes)
    assert indexes[TTL_INDEX]["expireAfterSeconds"] == 7 * 86400
    assert log.fallbacks == 0 and not (tmp_path / "a.jsonl").exists()  # sink "mongodb": no file
    ensure_indexes(coll, 30)  # a new retention replaces the TTL in place
    ttl = {i["name"]: i for i in coll.list_indexes()}[TTL_INDEX]
    assert ttl["expireAfterSeconds"] == 30 * 86400


def test_both_writes_the_file_and_the_collection(
    engine_uri: str, db_name: str, tmp_path: Path, client: MongoClient[dict[str, Any]]
) -> None:
    log = _log(tmp_path / "a.jsonl", engine_uri, db_name, sink="both", instance="srv-1")
    _reject(log, "r1")
    log.close()
    assert [e["request_id"] for e in _lines(tmp_path / "a.jsonl")] == ["r1"]
    assert [e["request_id"] for e in read_events_db(client[db_name][COLLECTION])] == ["r1"]


def test_an_unreachable_sink_falls_back_to_the_file_counted_and_never_raises(tmp_path: Path) -> None:
    dead = f"mongodb://127.0.0.1:{free_port()}"
    log = _log(tmp_path / "a.jsonl", dead, "x", timeout_ms=200, instance="srv-1")

    async def calls() -> None:  # from the event loop, as the server writes: queued, never awaited on
        for i in range(3):
            _reject(log, f"r{i}")
        await log.synced()

    asyncio.run(calls())
    assert [e["request_id"] for e in _lines(tmp_path / "a.jsonl")] == ["r0", "r1", "r2"]
    assert log.fallbacks == 3 and log.queue_depth == 0
    log.close()


def test_a_full_queue_goes_to_the_fallback_at_once_and_nothing_is_dropped(tmp_path: Path) -> None:
    """The writer is held inside its first fallback; events beyond the queue bound fall back on
    the caller's thread at once (counted), and every event ends up on file."""
    blocked, release = threading.Event(), threading.Event()
    written: list[str] = []

    def fallback(lines: list[str]) -> None:
        if threading.current_thread().name == "mongogate-audit-db" and not release.is_set():
            blocked.set()
            release.wait()
        written.extend(lines)

    sink = MongoSink(f"mongodb://127.0.0.1:{free_port()}", "x", fallback, queue_size=3, timeout_ms=200)

    async def calls() -> None:
        sink.submit({"event": "e", "n": 0}, "0\n")
        await asyncio.to_thread(blocked.wait)  # the writer holds event 0
        for n in range(1, 6):
            sink.submit({"event": "e", "n": n}, f"{n}\n")
        assert sink.depth == 3  # event 0 in hand, 1 and 2 queued
        assert sorted(written) == ["3\n", "4\n", "5\n"] and sink.fallbacks == 4  # and 0, in hand
        release.set()
        await sink.synced()

    asyncio.run(calls())
    assert sorted(written) == [f"{n}\n" for n in range(6)] and sink.fallbacks == 6 and sink.depth == 0
    sink.close()


def test_close_writes_what_is_queued(
    engine_uri: str, db_name: str, tmp_path: Path, client: MongoClient[dict[str, Any]]
) -> None:
    log = _log(tmp_path / "a.jsonl", engine_uri, db_name, instance="srv-1")

    async def calls() -> None:
        for i in range(20):
            _reject(log, f"r{i}")  # queued only: the loop never waits on the database

    asyncio.run(calls())
    log.close()  # shutdown
    assert client[db_name][COLLECTION].count_documents({}) == 20


def test_follow_db_prints_each_event_once_including_late_arrivals(
    engine_uri: str, db_name: str, client: MongoClient[dict[str, Any]]
) -> None:
    coll = client[db_name][COLLECTION]
    now = datetime.now(UTC)
    coll.insert_one({"_id": "a", "event": "filter_rejected", "ts": now, "request_id": "a"})
    got: list[str] = []
    stream = follow_db(coll, poll_s=0.01, stop=lambda: len(got) >= 3)
    for event in stream:
        got.append(event["request_id"])
        if len(got) == 1:  # written after the follow began: one newer, one older (a late arrival)
            coll.insert_one(
                {"_id": "b", "event": "query", "ts": now + timedelta(seconds=1), "request_id": "b"}
            )
            coll.insert_one(
                {"_id": "c", "event": "query", "ts": now - timedelta(seconds=5), "request_id": "c"}
            )
    assert got == ["a", "c", "b"]  # each once; the late one in time order of its poll
