"""BSON -> JSON rendering, projection and the byte cap."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from bson import Binary, Decimal128, Int64, ObjectId, Regex, Timestamp

from mongogate.policy.render import cap_documents, iso_utc, json_size, project, to_json
from tests.policy.specs import ITEMS, ORDERS

OID = ObjectId("65f1a2b3c4d5e6f708192a3b")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (OID, "65f1a2b3c4d5e6f708192a3b"),
        (datetime(2024, 5, 1, 12, 0, tzinfo=UTC), "2024-05-01T12:00:00Z"),
        (datetime(2024, 5, 1, 12, 0), "2024-05-01T12:00:00Z"),  # naive = UTC, pymongo's default
        (datetime(2024, 5, 1, 14, 0, tzinfo=timezone(timedelta(hours=2))), "2024-05-01T12:00:00Z"),
        (datetime(2024, 5, 1, 12, 0, 0, 123_456, tzinfo=UTC), "2024-05-01T12:00:00.123Z"),
        (Decimal128("12.50"), "12.50"),
        (Decimal("1.5"), "1.5"),
        (b"\x00\xff", "AP8="),
        (Binary(b"abc", 0), "YWJj"),
        (Int64(7), 7),
        (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
        (float("nan"), "nan"),
        (Timestamp(1714564800, 1), "2024-05-01T12:00:00Z"),
        (Regex("^a", "i"), "/^a/i"),
        (None, None),
        (True, True),
        ("text", "text"),
        (
            {"a": [OID, {"b": datetime(2024, 1, 1, tzinfo=UTC)}]},
            {"a": [str(OID), {"b": "2024-01-01T00:00:00Z"}]},
        ),
        ((1, 2), [1, 2]),
    ],
)
def test_to_json(value: object, expected: object) -> None:
    out = to_json(value)
    assert out == expected
    json.dumps(out, allow_nan=False)


def test_iso_utc_has_z() -> None:
    assert iso_utc(datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2024-01-02T03:04:05Z"


def test_project_keeps_only_listed_fields() -> None:
    doc = {"_id": OID, "userId": "acme", "number": "A-1", "status": "open", "total": 1, "secret": "x"}
    assert project(doc, ORDERS) == {"number": "A-1", "status": "open", "total": 1}


def test_project_id_only_when_listed_and_dotted_paths() -> None:
    doc = {"_id": OID, "qty": 2, "org": "acme", "meta": {"color": "red", "cost": 5}}
    assert project(doc, ITEMS) == {"_id": OID, "qty": 2, "meta": {"color": "red"}}
    arr = {"meta": [{"color": "red", "cost": 1}, {"cost": 2}, "junk"]}
    assert project(arr, ITEMS) == {"meta": {"color": ["red"]}}
    assert project({"meta": "flat"}, ITEMS) == {}


def test_cap_documents() -> None:
    docs = [{"n": i, "pad": "x" * 100} for i in range(10)]
    size = json_size(docs[0])
    assert cap_documents(docs, 10_000) == (docs, False)
    kept, cut = cap_documents(docs, 2 + 3 * size + 2)  # brackets, 3 docs, 2 commas
    assert (len(kept), cut) == (3, True)
    assert json_size(kept) <= 2 + 3 * size + 2
    kept, cut = cap_documents(docs, 2 + 3 * size + 1)
    assert (len(kept), cut) == (2, True)
    assert cap_documents([{"big": "x" * 5000}], 1024) == ([], True)
    assert cap_documents([], 1024) == ([], False)


def test_cap_counts_utf8_bytes() -> None:
    docs = [{"s": "é" * 100}]  # 200 bytes in UTF-8, not 100
    assert json_size(docs[0]) == len('{"s":""}') + 200
    assert cap_documents(docs, 150)[1] is True
