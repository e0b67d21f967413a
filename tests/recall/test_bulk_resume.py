"""A `memory import` killed between a batch's insert and its revision bump (SIGKILL, a real
process): the same import run again resumes at re-run pace (the stored lines read by `_id` in one
find per batch, neither embedded nor written again), finishes with the right counts and quota, and
every process's index finds the killed batch's memories (issue 38 item 5)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.recall import documents as rd
from mongogate.recall.bulk import import_lines, read_lines
from mongogate.recall.documents import MEMORIES
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.model import MemoryScope, scope_key
from mongogate.recall.store import LongTermMemory
from tests.recall.test_writes import Commands, filters

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
ACME = MemoryScope("acme")
LINES, BATCH = 25, 10

KILLED_IMPORT = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from pymongo import AsyncMongoClient
    from mongogate.config import LimitsSettings, LongTermSettings
    from mongogate.recall.bulk import import_lines, read_lines
    from mongogate.recall.embedding import LocalEmbedder
    from mongogate.recall.model import MemoryScope
    from mongogate.recall.store import LongTermMemory

    uri, db, path, batch = sys.argv[1:5]
    inserted = 0

    def die(point):
        global inserted
        if point == "import.after_insert":
            inserted += 1
            if inserted == 2:  # the second batch is stored; no bump, no reply
                os.kill(os.getpid(), signal.SIGKILL)

    async def main():
        client = AsyncMongoClient(uri, tz_aware=True)
        ltm = LongTermMemory(client[db], LongTermSettings(), LocalEmbedder(), limits=LimitsSettings())
        await ltm.ensure_indexes()
        ltm.fault = die
        with open(path, "rb") as f:
            await import_lines(ltm, MemoryScope("acme"), read_lines(f, 1 << 20), batch=int(batch))

    asyncio.run(main())
    """
)


class Counted(LocalEmbedder):
    """The real model, counting the texts it embedded."""

    texts = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += len(texts)
        return await super().embed(texts)


def fact(i: int) -> str:
    return f"Order AC-{i} shipped on day {i % 28 + 1} to the harbour office."


async def test_a_killed_import_resumes_writing_only_the_lines_it_had_left(
    engine_uri: str,
    db_name: str,
    tmp_path: Path,
    clock: ManualClock,
    settings: LongTermSettings,
) -> None:
    """Broke before: the re-run embedded every stored line again and inserted it again (a
    duplicate `_id` each, read back by its own `find_one`), at 1.9-2.8x the first import's time."""
    src = tmp_path / "in.jsonl"
    rows = [{"text": fact(i), "key": f"k{i}"} for i in range(LINES)]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    listener, embedder = Commands(), Counted()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        engine_uri, tz_aware=True, event_listeners=[listener]
    )
    try:
        ltm = LongTermMemory(client[db_name], settings, embedder, clock, limits=LimitsSettings())
        await ltm.ensure_indexes()
        assert (await ltm.recall(ACME, fact(15), min_score=0)).memories == []  # an index loaded
        done = subprocess.run(
            [sys.executable, "-c", KILLED_IMPORT, engine_uri, db_name, str(src), str(BATCH)],
            cwd=ROOT,
            capture_output=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == -9, done.stderr[-2000:]
        assert await ltm.memories.count_documents({"tenant": "acme"}) == 2 * BATCH
        embedder.texts, listener.on = 0, True
        with src.open("rb") as f:
            report = await import_lines(ltm, ACME, read_lines(f, 1 << 20), batch=BATCH)
        listener.on = False
        assert report.counts() == {
            "created": LINES - 2 * BATCH,
            "updated": 0,
            "unchanged": 2 * BATCH,
            "bad": 0,
        }
        assert await ltm.memories.count_documents({"tenant": "acme"}) == LINES
        mine = [c for c in listener.seen if c.get(c["_name"]) == MEMORIES]
        # one read by `_id` per batch; only the lines never stored are inserted
        assert [c["_name"] for c in mine] == ["find", "find", "find", "insert"]
        assert all(set(f) == {"_id"} for c in mine for f in filters(c))
        assert [len(c["documents"]) for c in mine if c["_name"] == "insert"] == [LINES - 2 * BATCH]
        assert embedder.texts == LINES - 2 * BATCH  # the stored lines are not embedded again
        # the quota counter holds each memory once (the killed batch reserved its places)
        held = await ltm.revisions.find_one({"_id": scope_key(ACME)})
        assert held is not None and held[rd.HELD] == LINES
        # the killed batch, never bumped, is named by the resume: the index loaded before finds it
        found = await ltm.recall(ACME, fact(15), min_score=0)
        assert found.memories and found.memories[0].text == fact(15)
    finally:
        await client.close()
