"""What an erasure does to the audit trail: `audit_events` keeps every event of the erased tenant
or subject, redacted; the audit file is not rewritten (append-only, copied elsewhere: the
receipt and docs/security.md say so); a subject is found under the form audit events show it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

import mongogate
from mongogate.audit import audit_from_settings
from mongogate.audit.erase import shown
from mongogate.audit.log import AuditLog
from mongogate.server.auth.verify import printable
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("subject", ["alice", "a\tb", "x\u2028y", "zoë", "line\nbreak\x7f"])
def test_a_subject_is_matched_as_audit_events_show_it(subject: str) -> None:
    assert shown(subject) == printable(subject)


def refused(log: AuditLog, tenant: str, principal: str, n: int) -> None:
    log.filter_rejected(
        tool="find_orders",
        tenant=tenant,
        principal=principal,
        reason="operator_not_allowed",
        path="filter.$where",
        filter={"$where": f"'{principal} {n}'", "email": "alice@example.com"},
        request_id=f"req-{tenant}-{n}",
    )


async def test_events_are_kept_redacted_and_the_file_is_left_as_it_was(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, audit={"sink": "both"})
    log = audit_from_settings(settings, engine_uri, "srv-1")  # as a server builds it
    for n, (tenant, who) in enumerate([("acme", "a\tb"), ("acme", "bob"), ("globex", "a\tb")]):
        refused(log, tenant, printable(who), n)
    log.close()
    file_before = settings.audit_path.read_bytes()
    async with AsyncMongoClient[dict[str, Any]](engine_uri, tz_aware=True) as client:
        coll = client[db_name]["audit_events"]
        before = {d["request_id"]: d async for d in coll.find({})}
        receipt = await mongogate.erase(settings, "acme", "a\tb")  # the subject as authenticated
        after = {d["_id"]: d async for d in coll.find({})}
    assert receipt.count("audit_events", "redacted") == 1
    assert settings.audit_path.read_bytes() == file_before
    assert any("audit file" in n and "not rewritten" in n for n in receipt.notes)
    gone = before["req-acme-0"]
    kept = after[gone["_id"]]
    assert kept["tenant"] == "acme" and kept["principal"] is None and kept["request_id"] is None
    assert (
        kept["erased"] == receipt.erasure_id and kept["reason"] == gone["reason"] and kept["ts"] == gone["ts"]
    )
    assert not {"filter", "offending", "path", "forbidden", "rpc_id"} & set(kept)
    for rid in ("req-acme-1", "req-globex-2"):  # another subject's, and the same subject in another tenant
        assert after[before[rid]["_id"]] == before[rid]


async def test_erasing_a_subject_leaves_the_one_that_displays_alike(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """'x<newline>' and the literal 'x\\n' are shown alike in logs (escaping is not one-to-one):
    erasing one must leave the other's events as they were."""
    settings = make_settings(engine_uri, db_name, tmp_path, audit={"sink": "mongodb"})
    log = audit_from_settings(settings, engine_uri, "srv-1")
    newline, literal = "x\n", "x\\n"
    assert printable(newline) == printable(literal)
    for n, who in enumerate([newline, literal]):  # as the server writes them (audit_calls.py)
        log.filter_rejected(
            tool="find_orders",
            tenant="acme",
            principal=printable(who),
            principal_id=who,
            reason="operator_not_allowed",
            path="filter.$where",
            filter={"$where": "1"},
            request_id=f"req-{n}",
        )
    log.close()
    async with AsyncMongoClient[dict[str, Any]](engine_uri, tz_aware=True) as client:
        coll = client[db_name]["audit_events"]
        before = {d["request_id"]: d async for d in coll.find({})}
        await mongogate.erase(settings, "acme", literal)
        after = {d["request_id"]: d async for d in coll.find({})}
    assert after["req-0"] == before["req-0"]  # the newline subject's event as it was
    redacted = [d for d in after.values() if d.get("erased")]
    assert len(redacted) == 1 and redacted[0]["principal"] is None and redacted[0]["principal_id"] is None
