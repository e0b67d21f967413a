"""A subject's erasure where conversations and long-term memory are the tenant's (the default,
`memory.long_term.scope = "tenant"`): the subject's conversations stay (they are the tenant's),
but nothing left names the subject: a summary it stored keeps its text, its `author` set to
null, in `summaries` and on the session (`summary.author`), as memories it wrote keep theirs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mongogate
from tests.conftest import jwt_auth, make_settings
from tests.erase_world import Mongo, of_tenant, seed, snapshot

pytestmark = pytest.mark.anyio


def naming(value: Any, name: str) -> list[str]:
    """The paths in a stored document whose value is exactly `name`."""
    if value == name:
        return [""]
    if isinstance(value, dict):
        return [f"{k}.{p}".rstrip(".") for k, v in value.items() for p in naming(v, name)]
    if isinstance(value, list):
        return [f"{i}.{p}".rstrip(".") for i, v in enumerate(value) for p in naming(v, name)]
    return []


async def test_a_subject_erased_under_tenant_wide_conversations_is_named_by_no_summary(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: Mongo
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path, auth=jwt_auth(), audit={"sink": "mongodb"})
    await seed(settings)
    before = await snapshot(mongo, db_name)
    authored = [
        i for i, d in before["summaries"].items() if d.get("tenant") == "acme" and d.get("author") == "alice"
    ]
    assert len(authored) == 1  # alice's compaction, in the tenant's conversations

    receipt = await mongogate.erase(settings, "acme", "alice")

    after = await snapshot(mongo, db_name)
    left = {
        (name, str(i), path)
        for name, docs in after.items()
        for i, d in docs.items()
        if of_tenant(name, d, "acme")
        for path in naming(d, "alice")
    }
    assert left == set()
    kept = after["summaries"][authored[0]]
    assert kept["author"] is None and kept["text"] == before["summaries"][authored[0]]["text"]
    sid = str(before["summaries"][authored[0]]["session_id"])
    shown = after["sessions"][sid]["summary"]
    assert shown["author"] is None and shown["text"] == before["sessions"][sid]["summary"]["text"]
    assert receipt.count("summaries", "redacted") == 1
    assert receipt.count("sessions", "redacted") == 1
    bob = [d for d in after["summaries"].values() if d.get("author") == "bob"]
    assert len(bob) == 1  # another subject's summary keeps its author
    again = await mongogate.erase(settings, "acme", "alice")
    assert again.total("redacted") == 0 and again.total("removed") == 0
