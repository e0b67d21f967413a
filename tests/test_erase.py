"""Erasure with a receipt (issue 39 item 4), over a deployment written through the real parts
(tests/erase_world.py): the public API and `mongogate erase` as a process. Every collection
holds none of the erased tenant's (or subject's) documents afterwards, read from the documents
themselves; the other tenant's and the other subject's are exactly as they were; audit events
stay, redacted; the receipt names every collection with its count and a digest an auditor can
recompute from the ids; a second run removes 0; a run killed half way is resumed by the next
with the same totals and digest, and the receipt says it took two runs."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import bson
import pytest

import mongogate
from mongogate.assembly import erasure_plan
from mongogate.erasure import LEASE, Removed
from mongogate.errors import InvalidInput
from tests.conftest import Cli
from tests.erase_world import (
    DERIVED,
    SUBJECT_HELD,
    TENANT_HELD,
    Mongo,
    erase_cli,
    of_subject,
    of_tenant,
    seed,
    snapshot,
    world_settings,
)

pytestmark = pytest.mark.anyio

#: the application's data the query tools read: never mongogate's to erase
APPLICATION = {"orders"}
Snapshot = dict[str, dict[Any, dict[str, Any]]]


def digest(collection: str, ids: set[Any]) -> str:
    """The receipt's digest as docs/security.md defines it, computed here from the ids."""
    total = 0
    for i in ids:
        raw = b"mongogate.erase/1\x00" + collection.encode() + b"\x00" + bson.encode({"_id": i})
        total = (total + int.from_bytes(hashlib.sha256(raw).digest(), "big")) % (1 << 256)
    return f"{total:064x}"


def held(snap: Snapshot, test: Any) -> dict[str, set[Any]]:
    return {name: {i for i, d in docs.items() if test(name, d)} for name, docs in snap.items()}


def same_documents(before: Snapshot, after: Snapshot, ids: dict[str, set[Any]]) -> None:
    for name, keep in ids.items():
        for i in keep:
            assert after[name].get(i) == before[name][i], (name, i)


def every_collection_named(receipt: dict[str, Any]) -> None:
    named = {c["collection"] for c in receipt["collections"]}
    declared = {name for d in erasure_plan() for name in d.collections()}
    assert named == declared, declared ^ named


@pytest.fixture
async def world(engine_uri: str, db_name: str, tmp_path: Path, mongo: Mongo) -> tuple[Any, Snapshot]:
    settings = world_settings(engine_uri, db_name, tmp_path)
    await seed(settings)
    return settings, await snapshot(mongo, db_name)


async def test_a_tenant_erased_through_the_api_leaves_nothing_of_it_and_the_other_tenant_as_it_was(
    world: tuple[Any, Snapshot], mongo: Mongo, db_name: str
) -> None:
    settings, before = world
    acme = held(before, lambda n, d: of_tenant(n, d, "acme"))
    globex = held(before, lambda n, d: of_tenant(n, d, "globex"))
    assert {n for n, ids in acme.items() if ids} - DERIVED == TENANT_HELD  # something of every kind
    receipt = await mongogate.erase(settings, "acme")
    after = await snapshot(mongo, db_name)
    assert not any(held(after, lambda n, d: of_tenant(n, d, "acme")).values())
    same_documents(before, after, globex)
    assert after["orders"] == before["orders"]  # the application's data, which query tools read
    out = receipt.as_json()
    every_collection_named(out)
    rows = {(c["collection"], c["action"]): c for c in out["collections"]}
    removed = {n for d in erasure_plan() for p in d.parts if isinstance(p, Removed) for n in [p.collection]}
    for name in removed:
        row = rows[(name, "removed")]
        assert row["count"] == row["this_run"] == len(acme.get(name, set())), name
        assert row["digest"] == digest(name, acme.get(name, set())), name
    events = rows[("audit_events", "redacted")]
    assert events["count"] == len(acme["audit_events"]) == 2 and events["digest"] == digest(
        "audit_events", acme["audit_events"]
    )
    for i in acme["audit_events"]:  # each event is still there, with nothing that says whose
        kept = after["audit_events"][i]
        was = before["audit_events"][i]
        assert kept["erased"] == receipt.erasure_id
        assert kept["tenant"] is None and kept["principal"] is None and kept["request_id"] is None
        assert not {"filter", "offending", "path", "forbidden", "rpc_id"} & set(kept)
        assert {k: kept[k] for k in ("event", "tool", "reason", "ts", "instance")} == {
            k: was[k] for k in ("event", "tool", "reason", "ts", "instance")
        }
    assert out["removed"] == sum(len(acme[n]) for n in removed if n in acme) and out["runs"] == 1
    assert out["resumed"] is False and out["subject"] is None and out["tenant"] == "acme"
    assert out["finished_at"].endswith("Z") and out["started_at"] <= out["finished_at"]
    assert "erasures" not in await mongo[db_name].list_collection_names() or (
        await mongo[db_name]["erasures"].count_documents({}) == 0
    )  # the journal is gone: nothing in the database names the erasure's target
    again = await mongogate.erase(settings, "acme")
    assert again.total("removed") == again.total("redacted") == 0 and again.runs == 1
    assert again.erasure_id != receipt.erasure_id
    assert await snapshot(mongo, db_name) == after


async def test_a_subject_erased_by_the_command_leaves_the_other_subject_and_the_tenant(
    world: tuple[Any, Snapshot], mongo: Mongo, db_name: str, engine_uri: str, tmp_path: Path
) -> None:
    _, before = world
    alice = held(before, lambda n, d: of_subject(n, d, "acme", "alice"))
    assert {n for n, ids in alice.items() if ids} - DERIVED == SUBJECT_HELD
    others = held(before, lambda n, d: not of_subject(n, d, "acme", "alice"))
    done = erase_cli(engine_uri, db_name, tmp_path, "--tenant", "acme", "--subject", "alice", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    after = await snapshot(mongo, db_name)
    assert not any(held(after, lambda n, d: of_subject(n, d, "acme", "alice")).values())
    same_documents(before, after, {n: ids - alice.get(n, set()) for n, ids in others.items()})
    every_collection_named(out)
    rows = {(c["collection"], c["action"]): c for c in out["collections"]}
    for name in ("sessions", "messages", "summaries", "memories", "memory_versions", "memory_revisions"):
        assert rows[(name, "removed")]["count"] == len(alice[name]), name
    assert rows[("audit_events", "redacted")]["count"] == len(alice["audit_events"]) == 1
    for i in alice["audit_events"]:
        kept = after["audit_events"][i]
        assert kept["tenant"] == "acme" and kept["principal"] is None and "filter" not in kept
    for name in ("runs", "run_events", "investigations"):  # a run is the tenant's, not a subject's
        assert rows[(name, "untouched")]["why"].startswith("holds no subject's documents")
    assert out["subject"] == "alice" and any("carry no subject" in n for n in out["notes"])
    again = erase_cli(engine_uri, db_name, tmp_path, "--tenant", "acme", "--subject", "alice", "--json")
    assert json.loads(again.stdout)["removed"] == 0 and json.loads(again.stdout)["redacted"] == 0


@pytest.mark.parametrize(
    "point", ["erase.after_journal:removed:messages", "erase.after_apply:removed:memories"]
)
async def test_an_erasure_killed_half_way_is_finished_by_the_next_run_with_the_same_totals(
    world: tuple[Any, Snapshot], mongo: Mongo, db_name: str, engine_uri: str, tmp_path: Path, point: str
) -> None:
    """Killed (exit 137, no clean-up) after a batch was journaled, or applied but not yet counted;
    the next run within the lease is refused (the killed one still holds it), the one after the
    lease expired (a clock 130 s ahead) finishes: counts and digests as one uninterrupted run's."""
    _, before = world
    acme = held(before, lambda n, d: of_tenant(n, d, "acme"))
    args = ("--tenant", "acme", "--json", "--batch-size", "2")
    killed = erase_cli(engine_uri, db_name, tmp_path, *args, crash=point)
    assert killed.returncode == 137, killed.stderr
    assert any(held(await snapshot(mongo, db_name), lambda n, d: of_tenant(n, d, "acme")).values())
    busy = erase_cli(engine_uri, db_name, tmp_path, *args)
    assert busy.returncode != 0 and "[lease_busy]" not in busy.stdout
    assert "is busy" in busy.stderr and "killed before it finished" in busy.stderr
    resumed = erase_cli(
        engine_uri, db_name, tmp_path, *args, skew_ms=int(LEASE.total_seconds() * 1000) + 10_000
    )
    assert resumed.returncode == 0, resumed.stderr
    out = json.loads(resumed.stdout)
    assert out["runs"] == 2 and out["resumed"] is True
    rows = {(c["collection"], c["action"]): c for c in out["collections"]}
    for name, ids in acme.items():
        if name in APPLICATION or not ids:
            continue
        action = "redacted" if name == "audit_events" else "removed"
        assert rows[(name, action)]["count"] == len(ids), name
        assert rows[(name, action)]["digest"] == digest(name, ids), name
    assert out["removed_this_run"] < out["removed"]  # the killed run's share is in the totals
    assert not any(held(await snapshot(mongo, db_name), lambda n, d: of_tenant(n, d, "acme")).values())
    text = erase_cli(engine_uri, db_name, tmp_path, "--tenant", "acme")
    assert text.returncode == 0 and "removed 0, redacted 0" in text.stdout


def test_the_text_receipt_names_every_collection_and_its_digest(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    done = erase_cli(engine_uri, db_name, tmp_path, "--tenant", "acme", "--subject", "bob")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("erasure ") and "tenant 'acme', subject 'bob'" in lines[0]
    assert lines[1].startswith("finished ") and "1 run)" in lines[1]
    for d in erasure_plan():
        for name in d.collections():
            assert any(line.split()[1:2] == [name] for line in lines[2:]), name
    assert any(
        line.startswith("digest sha256:") and len(line) == len("digest sha256:") + 64 for line in lines
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--tenant", " acme"], "no tenant can be"),
        (["--tenant", "ac\x07me"], "no tenant can be"),
        (["--tenant", ""], "the tenant must be a non-empty string"),
        (["--tenant", "acme", "--subject", "*"], "'*' is not a subject"),
        (["--tenant", "acme", "--subject", ""], "the subject must be a non-empty string"),
        (["--tenant", "x" * 4097], "at most 4096"),
    ],
)
def test_a_name_nothing_could_be_stored_under_is_refused_before_anything_is_read(
    cli: Cli, args: list[str], said: str, tmp_path: Path
) -> None:
    env = {"MONGOGATE_DATABASE__URI": "mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=1"}
    env |= {"MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "data"), "PATH": os.environ.get("PATH", "")}
    done = cli(["erase", *args], env=env)
    assert done.returncode == 2 and said in done.stderr, done.stderr  # not 3: no database was asked


async def test_the_public_api_refuses_a_bad_subject_with_invalid_input(tmp_path: Path) -> None:
    settings = mongogate.load_settings(None, server={"data_dir": str(tmp_path)})
    with pytest.raises(InvalidInput, match="'\\*' is not a subject"):
        await mongogate.erase(settings, "acme", "*")
