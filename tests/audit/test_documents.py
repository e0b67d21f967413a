"""The audit event's field names live in one place (`audit/documents.py`): each kind the log
writes, and each document the collection holds, names fields of its type only, with every
required one present; the collection's indexes and JSON fields name fields of the document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from mongogate.audit.documents import AuditEvent, AuditEventDoc
from mongogate.audit.log import AuditLog
from mongogate.audit.store import COLLECTION, INDEXES, JSON_FIELDS


def fields(doc: Any) -> set[str]:
    return set(doc.__required_keys__ | doc.__optional_keys__)


def test_the_collections_indexes_and_json_fields_name_fields_of_the_document() -> None:
    named = {key for _, keys in INDEXES for key, _ in keys} | set(JSON_FIELDS)
    assert named - fields(AuditEventDoc) == set()


def test_every_kind_written_holds_the_typed_fields(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    log = AuditLog.for_database(
        tmp_path / "a.jsonl",
        uri=engine_uri,
        db_name=db_name,
        sink="both",
        queue_size=100,
        timeout_ms=2000,
        retention_days=7,
        redact_values=False,
        max_value_chars=64,
        stream=None,
        instance="srv-1",
    )
    refused = {
        "tool": "find_orders",
        "tenant": "acme",
        "principal": "p",
        "reason": "operator_not_allowed",
        "path": "filter.$where",
        "filter": {"$where": "sleep(1)", "a": {"$gt": 1}},
        "request_id": "r1",
    }
    log.filter_rejected(**refused)  # type: ignore[arg-type]
    log.call_failed(**{**refused, "request_id": "r2"})  # type: ignore[arg-type]
    log.query(
        tool="find_orders", tenant="acme", principal="p", returned=3, truncated=False, ms=1.5, request_id="r3"
    )
    log.close()
    lines = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [e["event"] for e in lines] == ["filter_rejected", "storage_error", "query"]
    for event in lines:
        assert AuditEvent.__required_keys__ <= set(event) <= fields(AuditEvent), event
    client: MongoClient[dict[str, Any]] = MongoClient(engine_uri, tz_aware=True)
    try:
        docs = list(client[db_name][COLLECTION].find())
    finally:
        client.close()
    assert len(docs) == 3
    for doc in docs:
        assert AuditEventDoc.__required_keys__ <= set(doc) <= fields(AuditEventDoc), doc
