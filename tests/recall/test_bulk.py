"""Bulk import and export (`recall/bulk.py`, `mongogate memory import|export`) against the real
engine and the real wordllama model: idempotent by key, bad lines reported by number with nothing
else lost, the quota kept, an export imported elsewhere the same memories."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import LongTermSettings
from mongogate.recall.bulk import LINE_SLACK, export_lines, import_lines, read_lines
from mongogate.recall.model import MemoryScope
from mongogate.recall.store import LongTermMemory
from tests.helpers import EXE

pytestmark = pytest.mark.anyio

ACME = MemoryScope("acme")


def jsonl(*rows: object) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in rows)


def lines_of(data: bytes, limit: int = 2048) -> Any:
    return read_lines(io.BytesIO(data), limit)


GOOD: list[dict[str, Any]] = [
    {"text": "The office wifi password is korMoran-77.", "namespace": "office", "key": "wifi"},
    {"text": "Dana prefers tea, never coffee.", "namespace": "people/dana", "metadata": {"kind": "pref"}},
    {"text": "Invoice INV-2291 was paid on 3 March.", "ttl_days": 30},
    {"text": "A fact without namespace or key."},
]


async def test_import_reports_bad_lines_by_number_and_keeps_the_rest(ltm: LongTermMemory) -> None:
    data = jsonl(
        GOOD[0],
        b"{not json",
        GOOD[1],
        b"[1, 2]",
        {"text": "x", "colour": "red"},  # unknown field
        {"text": "ok", "namespace": "bad namespace"},
        b"",  # blank: skipped, not bad
        {"text": "y" * 5000},  # longer than the line limit
        GOOD[2],
        {"text": ""},
        GOOD[3],
    )
    report = await import_lines(ltm, ACME, lines_of(data), author="importer", batch=2)
    assert report.counts() == {"created": 4, "updated": 0, "unchanged": 0, "bad": 6}
    assert [n for n, _ in report.bad] == [2, 4, 5, 6, 8, 10]
    why = dict(report.bad)
    assert why[2].startswith("not JSON") and why[4] == "not a JSON object" and "'colour'" in why[5]
    assert "namespace" in why[6] and "longer than 2048 bytes" in why[8] and "text" in why[10]
    page = await ltm.list(ACME, limit=10)
    assert sorted(m.text for m in page.memories) == sorted(g["text"] for g in GOOD)
    assert {m.author for m in page.memories} == {"importer"}
    found = await ltm.recall(ACME, "wifi password")
    assert found.memories[0].key == "wifi" and found.memories[0].namespace == "office"


async def test_a_second_import_is_all_unchanged_and_a_changed_text_an_update(ltm: LongTermMemory) -> None:
    data = jsonl(*GOOD)
    first = await import_lines(ltm, ACME, lines_of(data))
    assert first.counts() == {"created": 4, "updated": 0, "unchanged": 0, "bad": 0}
    again = await import_lines(ltm, ACME, lines_of(data))
    assert again.counts() == {"created": 0, "updated": 0, "unchanged": 4, "bad": 0}
    changed = dict(GOOD[0], text="The office wifi password is now Lantern-12.")
    third = await import_lines(ltm, ACME, lines_of(jsonl(changed, *GOOD[1:])), author="bob")
    assert third.counts() == {"created": 0, "updated": 1, "unchanged": 3, "bad": 0}
    wifi = next(m for m in (await ltm.list(ACME)).memories if m.key == "wifi")
    history = await ltm.history(ACME, wifi.id)
    assert [(v.text, v.author) for v in history.versions] == [
        (GOOD[0]["text"], "cli:import"),
        (changed["text"], "bob"),
    ]


async def test_the_same_key_twice_in_one_batch_is_one_memory_last_line_wins(ltm: LongTermMemory) -> None:
    rows = [{"text": "v1", "key": "k"}, {"text": "v2", "key": "k"}, {"text": "v2", "key": "k"}]
    report = await import_lines(ltm, ACME, lines_of(jsonl(*rows)))
    assert report.counts() == {"created": 1, "updated": 1, "unchanged": 1, "bad": 0}
    page = await ltm.list(ACME)
    assert [(m.text, m.version) for m in page.memories] == [("v2", 2)]


async def test_the_scope_quota_holds_and_the_lines_past_it_are_reported(ltm: LongTermMemory) -> None:
    rows = [{"text": f"Fact number {i} about the garden."} for i in range(55)]  # max_per_scope = 50
    report = await import_lines(ltm, ACME, lines_of(jsonl(*rows)), batch=20)
    assert report.created == 50 and [n for n, _ in report.bad] == list(range(51, 56))
    assert all(why.startswith("quota_exceeded") for _, why in report.bad)


async def test_export_then_import_elsewhere_is_the_same_memories(
    ltm: LongTermMemory, clock: ManualClock
) -> None:
    await import_lines(ltm, ACME, lines_of(jsonl(*GOOD)))
    exported = [line async for line in export_lines(ltm, ACME)]
    rows = [json.loads(line) for line in exported]
    assert sorted(r["text"] for r in rows) == sorted(str(g["text"]) for g in GOOD)
    assert {r["text"]: r.get("ttl_days") for r in rows}[str(GOOD[2]["text"])] == 30
    other = MemoryScope("globex", "carol")
    into = await import_lines(ltm, other, lines_of("\n".join(exported).encode()))
    assert into.counts()["created"] == 4
    back = [json.loads(line) async for line in export_lines(ltm, other)]
    assert sorted(back, key=lambda r: r["text"]) == sorted(rows, key=lambda r: r["text"])
    assert [line async for line in export_lines(ltm, MemoryScope("acme", "carol"))] == []  # scopes stay apart


async def test_the_command_line_imports_exports_and_reports(
    mongo: AsyncMongoClient[dict[str, Any]], db_name: str, engine_uri: str, tmp_path: Path
) -> None:
    config = tmp_path / "mongogate.toml"
    config.write_text(
        f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n[server]\ndata_dir = "{tmp_path}"\n',
        encoding="utf-8",
    )
    src = tmp_path / "in.jsonl"
    src.write_bytes(jsonl(GOOD[0], b"oops", *GOOD[1:]))

    def run(*args: str, scope: str = "tenant") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*EXE, "memory", *args, "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=os.environ | {"MONGOGATE_MEMORY__LONG_TERM__SCOPE": scope},
        )

    first = run("import", str(src), "--tenant", "acme", "--json")
    assert first.returncode == 1 and f"{src}:2: not JSON" in first.stderr
    assert {k: v for k, v in json.loads(first.stdout).items() if k != "seconds"} == {
        "created": 4,
        "updated": 0,
        "unchanged": 0,
        "bad": 1,
    }
    again = run("import", str(src), "--tenant", "acme")
    assert again.stdout.startswith("created 0 updated 0 unchanged 4 bad 1")
    out = tmp_path / "out.jsonl"
    done = run("export", str(out), "--tenant", "acme")
    assert done.returncode == 0 and done.stdout.strip() == "exported 4 memories"
    back = run("import", str(out), "--tenant", "acme", "--subject", "dana", "--json", scope="subject")
    assert back.returncode == 0 and json.loads(back.stdout)["created"] == 4
    docs = await mongo[db_name]["memories"].find({"owner": "dana"}, {"author": 1}).to_list()
    assert {d["author"] for d in docs} == {"dana"}
    missing = run("import", str(src))
    assert missing.returncode != 0 and "--tenant" in missing.stderr


async def test_imported_memories_reach_an_index_already_loaded(ltm: LongTermMemory) -> None:
    """An import writes around `remember`, so it bumps the scope's revision itself: an index
    loaded before the import (this process's, or another server's) finds the imported memories
    at the next recall (before, recall kept answering from the index it had loaded)."""
    await import_lines(ltm, ACME, lines_of(jsonl(GOOD[3])))
    before = await ltm.recall(ACME, "office wifi password", min_score=0)  # loads the scope's index
    assert "korMoran" not in " ".join(m.text for m in before.memories)
    await import_lines(ltm, ACME, lines_of(jsonl(*GOOD[:3])))
    after = await ltm.recall(ACME, "office wifi password", min_score=0)
    assert after.memories and after.memories[0].text == GOOD[0]["text"]


async def test_a_deeply_nested_line_is_one_bad_line_not_the_end_of_the_import(ltm: LongTermMemory) -> None:
    """A line of 12,000 nested arrays (inside the default line limit) made json.loads raise
    RecursionError, which ended the import after the batches before it had been written."""
    deep = b"[" * 12_000 + b"]" * 12_000
    default_limit = LongTermSettings().max_text_bytes + LINE_SLACK
    assert len(deep) < default_limit
    data = jsonl(GOOD[0], deep, b'{"text": "t", "metadata": {"a": ' + deep[:-2] + b"}}", GOOD[1])
    report = await import_lines(ltm, ACME, read_lines(io.BytesIO(data), default_limit), batch=1)
    assert report.counts() == {"created": 2, "updated": 0, "unchanged": 0, "bad": 2}
    assert [n for n, _ in report.bad] == [2, 3]
    assert all("nested too deeply" in why for _, why in report.bad)


async def test_an_export_file_is_private_to_its_owner(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    """An export holds every memory of a scope (passwords people told the agent); it was created
    with the umask's mode, readable by every local user under umask 022."""
    config = tmp_path / "mongogate.toml"
    config.write_text(
        f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n[server]\ndata_dir = "{tmp_path}"\n',
        encoding="utf-8",
    )
    src = tmp_path / "in.jsonl"
    src.write_bytes(jsonl(GOOD[0]))
    stale = tmp_path / "stale.jsonl"
    stale.write_text("old\n", encoding="utf-8")
    stale.chmod(0o644)
    for out in (tmp_path / "out.jsonl", stale):
        for args in (("import", str(src)), ("export", str(out))):
            done = subprocess.run(
                [*EXE, "memory", *args, "--tenant", "acme", "--config", str(config)],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                umask=0o022,
            )
            assert done.returncode == 0, done.stderr
        assert out.stat().st_mode & 0o077 == 0, oct(out.stat().st_mode)
        assert "korMoran-77" in out.read_text(encoding="utf-8")
