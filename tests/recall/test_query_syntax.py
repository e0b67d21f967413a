"""Whatever the model types as a query is searched, never an engine error: `$text` syntax
(quotes, negation, punctuation) in a recall or search_messages query is just text."""

from __future__ import annotations

import pytest

from mongogate.recall.model import MemoryScope
from mongogate.recall.store import LongTermMemory

pytestmark = pytest.mark.anyio

QUERIES = [
    '"unbalanced',
    "-",
    "---",
    '""',
    "-ticket",
    '"AC-1" -x',
    "$where",
    "{}",
    "a\\b",
    "\u00e9t\u00e9 \U0001f600",
]


@pytest.mark.parametrize("query", QUERIES)
async def test_odd_queries_are_searched(ltm: LongTermMemory, query: str) -> None:
    await ltm.remember(MemoryScope("acme"), "ticket AC-1 is open")
    got = await ltm.recall(MemoryScope("acme"), query)
    assert len(got.memories) <= 1


async def test_a_negative_number_in_a_question_is_not_a_negation(ltm: LongTermMemory) -> None:
    m = await ltm.remember(MemoryScope("acme"), "The freezer must stay at -20 degrees.")
    got = await ltm.recall(MemoryScope("acme"), "-20 degrees", method="text")
    assert [x.id for x in got.memories] == [m.id]
