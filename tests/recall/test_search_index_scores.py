"""The search index's ranker (`recall/searchindex/`) shows the score the in-process index shows and
honours `min_score` (issue 41: on the old code `min_score` was never applied on this path, and a
score was `$text`'s textScore or the fusion's RRF sum, neither in [0, 1]).

The embedded engine has no `$vectorSearch`, so the path runs here through what it can: `$text`
alone (`method="text"`, and the fused method with the embedder failing), with
`vector_search = "atlas"` choosing the path; the meaning side's score is checked on
`shown_scores` with the `vectorSearchScore` values a search index answers.
"""

from __future__ import annotations

import pytest
from pymongo import AsyncMongoClient

from mongogate import scoring
from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.recall.model import MemoryScope
from mongogate.recall.searchindex.ranker import shown_scores
from mongogate.recall.store import LongTermMemory
from tests.recall.conftest import BrokenEmbedder

pytestmark = pytest.mark.anyio

ACME = MemoryScope("acme")
FACTS = [
    "The invoice for the garden is due on Friday.",
    "The invoice for the laptop was paid in March.",
    "The garden party is on Sunday afternoon.",
    "The dentist moved the appointment to Tuesday.",
]


async def atlas(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, embedder: BrokenEmbedder
) -> LongTermMemory:
    settings = LongTermSettings(vector_search="atlas", max_recall_limit=20, min_score=0.125)
    ltm = LongTermMemory(mongo[db_name], settings, embedder, limits=LimitsSettings())
    await ltm.ensure_indexes()
    for text in FACTS:
        await ltm.remember(ACME, text)
    return ltm


async def test_the_search_index_path_scores_in_0_1_and_honours_min_score(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, embedder: BrokenEmbedder
) -> None:
    ltm = await atlas(mongo, db_name, embedder)
    every = await ltm.recall(ACME, "invoice garden", method="text", min_score=0)
    assert every.index_path == "text" and every.vector_path == "none"
    assert every.memories[0].text == FACTS[0]  # holds both words
    assert {m.text for m in every.memories} == set(FACTS[:3])
    scores = [m.score or 0.0 for m in every.memories]
    assert all(m.score is not None and 0.0 <= m.score <= 1.0 for m in every.memories)
    # the best match holds every word: 1.0; one word of two: 0.9 x 1 + 0.1 x 0.5
    assert scores[0] == 1.0 and sorted(scores[1:]) == [0.95, 0.95]
    floored = await ltm.recall(ACME, "invoice garden", method="text", min_score=0.97)
    assert [m.text for m in floored.memories] == [FACTS[0]]


async def test_an_embedder_failure_on_the_search_index_path_still_floors_the_text_ranking(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, embedder: BrokenEmbedder
) -> None:
    ltm = await atlas(mongo, db_name, embedder)
    embedder.broken = True
    got = await ltm.recall(ACME, "invoice garden", min_score=0.97)
    assert got.vector_path == "unavailable" and [m.text for m in got.memories] == [FACTS[0]]


def test_the_meaning_side_is_the_cosine_a_search_index_scores() -> None:
    """`vectorSearchScore` is (1 + cosine) / 2 for a cosine index: the shown score is made of the
    cosine as the in-process index's is, and an unevidenced best match shows only its own tenth."""
    listed = [("a", {"text": "lots of sticky notes"}), ("b", {"text": "a red bicycle"})]
    sims = {"a": (1 + 0.6) / 2, "b": (1 + 0.1) / 2}
    got = shown_scores("quantum chromodynamics lecture", listed, sims, 0.5, both=True)
    best = scoring.blend(0.0, 0.6, 0.5)
    assert got == [pytest.approx(scoring.shown(best, best)), pytest.approx(scoring.shown(0.05, best))]
    weak = {"a": (1 + 0.1) / 2, "b": (1 + 0.05) / 2}
    unevidenced = shown_scores("quantum chromodynamics lecture", listed, weak, 0.5, both=True)
    assert unevidenced == [pytest.approx(0.1 * 0.05), pytest.approx(0.1 * 0.025)]
    assert shown_scores("anything", [], {}, 0.5, both=True) == []
