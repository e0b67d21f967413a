from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.errors import EmbeddingUnavailable
from mongogate.recall.embedding import LocalEmbedder
from mongogate.recall.store import LongTermMemory


class BrokenEmbedder(LocalEmbedder):
    """The real model behind a switch: a fault seam for "the embedder failed or timed out",
    which the local model cannot be made to do on demand (a fake only for what cannot run here)."""

    def __init__(self) -> None:
        self.broken = False

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.broken:
            raise EmbeddingUnavailable("the local embedding model failed; retry later")
        return await super().embed(texts)


class OtherModel(LocalEmbedder):
    """The same weights under another model name: what a model change looks like to the store."""

    model = "other/model-256"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def embedder() -> BrokenEmbedder:
    return BrokenEmbedder()


@pytest.fixture
def settings() -> LongTermSettings:
    # min_score 0: these tests are about ranking; the default floor has tests of its own (test_index.py)
    return LongTermSettings(
        max_per_scope=50, max_text_bytes=1024, max_query_chars=200, max_recall_limit=20, min_score=0.0
    )


@pytest.fixture
async def ltm(
    mongo: AsyncMongoClient[dict[str, object]],
    db_name: str,
    clock: ManualClock,
    embedder: BrokenEmbedder,
    settings: LongTermSettings,
) -> AsyncIterator[LongTermMemory]:
    store = LongTermMemory(mongo[db_name], settings, embedder, clock, limits=LimitsSettings())
    await store.ensure_indexes()
    yield store


@pytest.fixture
async def other_client(engine_uri: str) -> AsyncIterator[AsyncMongoClient[dict[str, object]]]:
    """A second, independent client: what another server process holds."""
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(engine_uri, tz_aware=True)
    try:
        yield client
    finally:
        await client.close()
