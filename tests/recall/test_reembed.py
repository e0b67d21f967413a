"""`mongogate memory reembed` (recall/reembedding.py): resumable, idempotent, never overwrites a newer text.

Memories are seeded as the store writes them (the `memories` documents of the recall contract),
embedded by an "old" model; the real local model re-embeds them.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pymongo import AsyncMongoClient

from mongogate.errors import EmbeddingUnavailable
from mongogate.recall.embedding import LOCAL_MODEL, LocalEmbedder
from mongogate.recall.reembedding import COLLECTION, reembed, stale_counts
from mongogate.recall.vectors import pack, unpack
from tests.helpers import EXE
from tests.recall.test_writes import Commands

pytestmark = pytest.mark.anyio

OLD = "old-model/8"
WHEN = datetime(2030, 1, 1, tzinfo=UTC)
TEXTS = [f"memory {i}: the meeting with supplier {i} moved to room {i * 3}" for i in range(8)]


def memory_doc(text: str, *, model: str | None = OLD, vec: Sequence[float] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "_id": uuid.uuid4().hex,
        "tenant": "acme",
        "owner": "*",
        "namespace": "default",
        "key": None,
        "text": text,
        "text_hash": "x",
        "metadata": {},
        "version": 1,
        "created_at": WHEN,
        "updated_at": WHEN,
        "expires_at": None,
    }
    if model is not None:
        vec = vec or [1.0] * 8
        doc |= {"embedding": pack(vec), "embedding_model": model, "embedding_dims": len(vec)}
    return doc


async def seed(mongo: AsyncMongoClient[dict[str, Any]], db_name: str) -> tuple[Any, list[dict[str, Any]]]:
    db = mongo[db_name]
    docs = [memory_doc(t) for t in TEXTS]
    docs.append(memory_doc("never embedded: stored while the embedder was down", model=None))
    current = LocalEmbedder().embed_sync(["already embedded by the configured model"])[0]
    docs.append(memory_doc("already embedded by the configured model", model=LOCAL_MODEL, vec=current))
    await db[COLLECTION].insert_many(docs)
    return db, docs


class FailingOnCall:
    """The real local model behind a failpoint: call number `n` raises as an outage would."""

    def __init__(self, n: int) -> None:
        self.inner = LocalEmbedder()
        self.model, self.dimensions = self.inner.model, self.inner.dimensions
        self.n, self.calls = n, 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.calls == self.n:
            raise EmbeddingUnavailable("the local embedding model failed; retry later")
        return await self.inner.embed(texts)


async def test_reembeds_every_stale_memory_once_and_a_second_run_does_nothing(
    mongo: AsyncMongoClient[dict[str, Any]], db_name: str
) -> None:
    db, docs = await seed(mongo, db_name)
    assert await stale_counts(db, LOCAL_MODEL) == {OLD: 8, "(none)": 1}
    report = await reembed(db, LocalEmbedder(), batch_size=3)
    assert (report.seen, report.reembedded, report.skipped, report.remaining) == (9, 9, 0, 0)
    after = {d["_id"]: d async for d in db[COLLECTION].find({})}
    want = LocalEmbedder().embed_sync([d["text"] for d in docs])
    for doc, vec in zip(docs, want, strict=True):
        got = after[doc["_id"]]
        assert got["embedding_model"] == LOCAL_MODEL and got["embedding_dims"] == 256
        np.testing.assert_allclose(unpack(got["embedding"]), vec, atol=1e-6)
        # re-embedding is not an edit: version and updated_at stay
        assert got["version"] == 1 and got["updated_at"].replace(tzinfo=UTC) == WHEN
    assert await stale_counts(db, LOCAL_MODEL) == {}
    again = await reembed(db, LocalEmbedder(), batch_size=3)
    assert (again.seen, again.reembedded, again.remaining) == (0, 0, 0)
    assert again.lines() == [f"re-embedded 0 of 0 memories with {LOCAL_MODEL}", "nothing left to re-embed"]


async def test_an_outage_midway_keeps_what_was_written_and_the_next_run_goes_on(
    mongo: AsyncMongoClient[dict[str, Any]], db_name: str
) -> None:
    db, _ = await seed(mongo, db_name)
    with pytest.raises(EmbeddingUnavailable):
        await reembed(db, FailingOnCall(2), batch_size=4)
    # the first batch of 4 (in _id order) is written whole; nothing of the failed second one is
    assert sum((await stale_counts(db, LOCAL_MODEL)).values()) == 5
    half = await db[COLLECTION].count_documents({"embedding_model": LOCAL_MODEL, "embedding_dims": 256})
    assert half == 5  # 4 re-embedded + the one that was current already
    rest = await reembed(db, LocalEmbedder(), batch_size=4)
    assert (rest.seen, rest.reembedded, rest.remaining) == (5, 5, 0)


async def test_a_memory_changed_during_the_run_keeps_its_new_text_and_vector(
    mongo: AsyncMongoClient[dict[str, Any]], db_name: str
) -> None:
    db, docs = await seed(mongo, db_name)
    target = sorted(docs[:8], key=lambda d: d["_id"])[0]  # in the first batch (batches go in _id order)
    new_text = "the supplier meeting is cancelled"
    new_vec = LocalEmbedder().embed_sync([new_text])[0]

    async def remember_meanwhile(batch: list[dict[str, Any]]) -> None:
        if any(d["_id"] == target["_id"] for d in batch):  # what a concurrent `remember` writes
            await db[COLLECTION].update_one(
                {"_id": target["_id"]},
                {
                    "$set": {"text": new_text, "embedding": pack(new_vec), "embedding_model": LOCAL_MODEL},
                    "$inc": {"version": 1},
                },
            )

    report = await reembed(db, LocalEmbedder(), batch_size=3, before_write=remember_meanwhile)
    assert (report.reembedded, report.skipped, report.remaining) == (8, 1, 0)
    assert "skipped 1 changed while re-embedding" in "\n".join(report.lines())
    got = await db[COLLECTION].find_one({"_id": target["_id"]})
    assert got is not None and got["text"] == new_text and got["version"] == 2
    np.testing.assert_allclose(unpack(got["embedding"]), new_vec, atol=1e-6)  # not the old text's


async def test_the_command_line_reembeds_and_reports(
    mongo: AsyncMongoClient[dict[str, Any]], db_name: str, engine_uri: str, tmp_path: Path
) -> None:
    await seed(mongo, db_name)
    config = tmp_path / "mongogate.toml"
    config.write_text(
        f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n[server]\ndata_dir = "{tmp_path}"\n',
        encoding="utf-8",
    )
    cli = [*EXE, "memory", "reembed", "--config", str(config)]

    def run(*extra: str) -> str:
        done = subprocess.run([*cli, *extra], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert json.loads(run("--dry-run", "--json")) == {"model": LOCAL_MODEL, "stale": {OLD: 8, "(none)": 1}}
    out = run("--batch-size", "4")
    assert out.splitlines() == [f"re-embedded 9 of 9 memories with {LOCAL_MODEL}", "nothing left to re-embed"]
    assert run("--dry-run").splitlines() == [f"0 memories to re-embed with {LOCAL_MODEL}"]
    bad = subprocess.run([*cli, "--batch-size", "0"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "give 1 to 2048" in bad.stderr


async def test_a_serving_index_finds_re_embedded_memories_by_meaning_at_once(
    mongo: AsyncMongoClient[dict[str, Any]], db_name: str
) -> None:
    """A server's index built while the memories had the old model's vectors holds them without
    a vector; re-embedding them must reach it like any other write (the revision and the write
    signal), not wait for the index to be read whole (an eviction or a restart)."""
    from mongogate.config import LimitsSettings, LongTermSettings
    from mongogate.recall.model import MemoryScope
    from mongogate.recall.store import LongTermMemory

    db, _ = await seed(mongo, db_name)
    serving = LongTermMemory(db, LongTermSettings(min_score=0.0), LocalEmbedder(), limits=LimitsSettings())
    question = "supplier 5 appointment location"  # shares words; asked by meaning alone below
    before = await serving.recall(MemoryScope("acme"), question, limit=3, method="vector")
    assert TEXTS[5] not in [m.text for m in before.memories]  # no vector of this model yet
    await reembed(db, LocalEmbedder(), batch_size=3)
    after = await serving.recall(MemoryScope("acme"), question, limit=3, method="vector")
    assert TEXTS[5] in [m.text for m in after.memories]


def _few_files() -> None:  # in the child: a soft limit below the scopes of one batch
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (FEW_FILES, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


#: the child's soft limit of open files (1024, the common default, needed 1,100 scopes)
FEW_FILES = 256


async def test_a_batch_spanning_more_scopes_than_open_files_is_re_embedded(
    mongo: AsyncMongoClient[dict[str, Any]], db_name: str, engine_uri: str, tmp_path: Path
) -> None:
    """Each scope of a batch is in flight for the write signal; one open file per scope ran out
    of files: OSError [Errno 24] out of `mongogate memory reembed --batch-size 2048` over 1,100
    tenants under `ulimit -n 1024`, and no memory of the batch re-embedded."""
    docs = [memory_doc(f"memory of tenant t{i}") | {"tenant": f"t{i}"} for i in range(FEW_FILES + 50)]
    await mongo[db_name][COLLECTION].insert_many(docs)
    config = tmp_path / "mongogate.toml"
    config.write_text(
        f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n[server]\ndata_dir = "{tmp_path}"\n',
        encoding="utf-8",
    )
    cli = [*EXE, "memory", "reembed", "--config", str(config), "--batch-size", "2048"]
    done = subprocess.run(
        cli, capture_output=True, text=True, timeout=120, check=False, preexec_fn=_few_files
    )
    assert done.returncode == 0, done.stderr[-2000:]
    n = len(docs)
    assert done.stdout.splitlines()[0] == f"re-embedded {n} of {n} memories with {LOCAL_MODEL}"


async def test_a_run_reads_the_collection_once_and_writes_each_memory_by_id_alone(
    engine_uri: str, db_name: str
) -> None:
    """Broke before (issue 38): each batch was a query of its own (a scan of the collection on the
    embedded engine) and each update filtered on `_id`, `version` and `embedding_model` (a second
    field in the filter scans too). Now one query for the run and updates by `_id` alone, the
    condition inside the update (a changed memory is still skipped: the test above)."""
    listener = Commands()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        engine_uri, tz_aware=True, event_listeners=[listener]
    )
    try:
        db, _ = await seed(client, db_name)
        listener.on = True
        report = await reembed(db, LocalEmbedder(), batch_size=3)
        listener.on = False
        assert report.reembedded == 9
        mine = [c for c in listener.seen if c.get(c["_name"]) == COLLECTION]
        # the stale memories read once, then counted once at the end (`remaining`)
        assert [c["_name"] for c in mine if c["_name"] in ("find", "aggregate")] == ["find", "aggregate"]
        updates = [u for c in mine if c["_name"] == "update" for u in c["updates"]]
        assert len(updates) == 9 and all(set(u["q"]) == {"_id"} for u in updates)
    finally:
        await client.close()
