"""Sources and event time (issue 39 item 3): `occurred_at` and `source` stored with a version,
returned on every read, filtered by `occurred_after`/`occurred_before` (half-open), refused in
clear words when malformed (nothing stored), and carried with the chain through export and
import, in any order, idempotently."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.errors import InvalidInput
from mongogate.recall.bulk import export_lines, import_lines, read_lines
from mongogate.recall.model import MemoryScope, Source
from mongogate.recall.store import LongTermMemory
from tests.recall.conftest import BrokenEmbedder

pytestmark = pytest.mark.anyio

ACME = MemoryScope("acme")
GLOBEX = MemoryScope("globex")
MAY = datetime(2025, 5, 14, tzinfo=UTC)


async def texts(ltm: LongTermMemory, **args: Any) -> list[str]:
    got = await ltm.recall(ACME, "what did we decide about the launch?", min_score=0, **args)
    return sorted(m.text for m in got.memories)


async def seed(ltm: LongTermMemory) -> None:
    await ltm.remember(ACME, "We decided in April to delay the launch.", occurred_at="2025-04-20")
    await ltm.remember(
        ACME,
        "We decided in May to launch in Lisbon.",
        occurred_at="2025-05-14T10:00:00+02:00",
        source={"session_id": "s1", "seq": 4},
    )
    await ltm.remember(ACME, "We decided in June to cut the launch budget.", occurred_at="2025-06-01")
    await ltm.remember(ACME, "We decided the launch colours: blue and white.")  # no event time


async def test_event_time_filters_recall_and_listing_half_open(ltm: LongTermMemory) -> None:
    await seed(ltm)
    assert len(await texts(ltm)) == 4
    may = await texts(ltm, occurred_after="2025-05-01", occurred_before="2025-06-01")
    assert may == ["We decided in May to launch in Lisbon."]  # June 1st is not before June 1st
    assert len(await texts(ltm, occurred_after="2025-05-01")) == 2  # no occurred_at: left out
    assert await texts(ltm, occurred_before="2025-04-20") == []
    item = (await ltm.recall(ACME, "Lisbon launch", occurred_after="2025-05-14")).memories[0]
    assert item.occurred_at == datetime(2025, 5, 14, 8, tzinfo=UTC) and item.source == Source("s1", 4)
    listed = await ltm.list(ACME, occurred_after="2025-04-01", occurred_before="2025-05-15")
    assert sorted(m.occurred_at.month for m in listed.memories if m.occurred_at) == [4, 5]
    assert len((await ltm.list(ACME)).memories) == 4


async def test_occurred_before_alone_leaves_out_memories_without_event_time_on_every_path(
    ltm: LongTermMemory, mongo: AsyncMongoClient[dict[str, object]], db_name: str, embedder: BrokenEmbedder
) -> None:
    """A stored `occurred_at: null` is no time at all, not a time before every other (the
    database's order puts null first: a bare `$lt` matched it)."""
    await seed(ltm)
    before_may = ["We decided in April to delay the launch."]
    assert await texts(ltm, occurred_before="2025-05-01") == before_may
    assert sorted(m.text for m in (await ltm.list(ACME, occurred_before="2025-05-01")).memories) == before_may
    atlas = LongTermMemory(
        mongo[db_name],
        LongTermSettings(vector_search="atlas", min_score=0.0),
        embedder,
        limits=LimitsSettings(),
    )
    await atlas.ensure_indexes()
    got = await atlas.recall(ACME, "decided launch", method="text", occurred_before="2025-05-01")
    assert got.index_path == "text" and [m.text for m in got.memories] == before_may


async def test_a_new_source_or_event_time_is_a_new_version_of_a_keyed_memory(ltm: LongTermMemory) -> None:
    first = await ltm.remember(ACME, "The launch is in Lisbon.", key="launch", occurred_at="2025-05-14")
    same = await ltm.remember(ACME, "The launch is in Lisbon.", key="launch", occurred_at=MAY)
    assert same.status == "unchanged"
    moved = await ltm.remember(
        ACME,
        "The launch is in Lisbon.",
        key="launch",
        occurred_at="2025-05-20",
        source={"session_id": "s2", "seq": 0},
    )
    assert (moved.status, moved.version) == ("updated", 2)
    h = await ltm.history(ACME, first.id)
    assert [(v.occurred_at, v.source) for v in h.versions] == [
        (MAY, None),
        (datetime(2025, 5, 20, tzinfo=UTC), Source("s2", 0)),
    ]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"occurred_at": "yesterday"}, "occurred_at='yesterday' is not a time"),
        ({"occurred_at": "2025-13-01"}, "is not a time"),
        ({"occurred_at": 1715680000}, "occurred_at must be a time"),
        ({"occurred_at": "x" * 41}, "occurred_at must be a time"),
        ({"source": {"session_id": "s1"}}, "source must be an object with exactly session_id and seq"),
        ({"source": {"session_id": "s1", "seq": 1, "role": "user"}}, "exactly session_id and seq"),
        ({"source": {"session_id": "s1", "seq": -1}}, "source.seq"),
        ({"source": {"session_id": "s1", "seq": True}}, "source.seq"),
        ({"source": {"session_id": "a:b", "seq": 1}}, "source.session_id must be a session id"),
        ({"source": "s1#4"}, "source must be an object"),
    ],
)
async def test_a_malformed_source_or_time_is_refused_and_nothing_stored(
    ltm: LongTermMemory, args: dict[str, Any], words: str
) -> None:
    with pytest.raises(InvalidInput, match=words.replace("(", r"\(").replace(")", r"\)")):
        await ltm.remember(ACME, "The launch is in Lisbon.", **args)
    assert await ltm.memories.count_documents({}) == 0


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"occurred_after": "2025-06-01", "occurred_before": "2025-05-01"}, "must be earlier than"),
        ({"occurred_after": "2025-06-01", "occurred_before": "2025-06-01"}, "must be earlier than"),
        ({"as_of": "soon"}, "as_of='soon' is not a time"),
        ({"include_superseded": "yes"}, "include_superseded must be true or false"),
    ],
)
async def test_a_malformed_filter_is_refused(ltm: LongTermMemory, args: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidInput, match=words):
        await ltm.recall(ACME, "launch", **args)


def lines(text: str) -> Any:
    return read_lines(io.BytesIO(text.encode()), 64 * 1024)


async def exported(ltm: LongTermMemory, scope: MemoryScope) -> list[dict[str, Any]]:
    return [json.loads(line) async for line in export_lines(ltm, scope)]


async def test_export_and_import_carry_sources_time_and_the_chain_in_any_order(
    ltm: LongTermMemory, clock: ManualClock
) -> None:
    paris = await ltm.remember(ACME, "Alice lives in Paris.", occurred_at="2024-01-01")
    clock.advance(60)
    berlin = await ltm.remember(
        ACME,
        "Alice moved to Berlin.",
        key="alice.city",
        supersedes=paris.id,
        source={"session_id": "s9", "seq": 2},
    )
    rows = await exported(ltm, ACME)
    by_text = {r["text"]: r for r in rows}
    assert by_text["Alice lives in Paris."]["occurred_at"] == "2024-01-01T00:00:00+00:00"
    assert by_text["Alice lives in Paris."]["superseded_by"][0]["key"] == "alice.city"
    assert by_text["Alice moved to Berlin."]["source"] == {"session_id": "s9", "seq": 2}
    assert set(by_text["Alice moved to Berlin."]["supersedes"][0]) == {"namespace", "text_sha256", "at"}
    for order in (rows, rows[::-1]):  # the newer line first or last: the link holds either way
        text = "".join(json.dumps(r) + "\n" for r in order)
        report = await import_lines(ltm, GLOBEX, lines(text), batch=1)
        assert report.bad == []
        got = await ltm.recall(GLOBEX, "Where does Alice live?", min_score=0)
        assert [m.text for m in got.memories] == ["Alice moved to Berlin."]
        assert got.memories[0].source == Source("s9", 2)
        assert (await exported(ltm, GLOBEX)) == rows  # the same lines back
        again = await import_lines(ltm, GLOBEX, lines(text))
        assert again.counts() == {"created": 0, "updated": 0, "unchanged": 2, "bad": 0}
        for m in (await ltm.list(GLOBEX)).memories:
            assert await ltm.forget(GLOBEX, id=m.id)
    assert berlin.supersedes[0].id == paris.id


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ({"text": "x", "supersedes": [{"namespace": "default", "at": "2025-01-01"}]}, "text_sha256"),
        ({"text": "x", "supersedes": [{"namespace": "default", "key": "k"}]}, "supersedes[0] must be"),
        ({"text": "x", "supersedes": "k"}, "supersedes must be a list"),
        ({"text": "x", "stated_at": "later"}, "stated_at='later' is not a time"),
        ({"text": "x", "source": {"session_id": "s", "seq": "4"}}, "source.seq"),
    ],
)
async def test_an_import_line_with_a_malformed_chain_is_reported(
    ltm: LongTermMemory, line: dict[str, Any], words: str
) -> None:
    report = await import_lines(ltm, ACME, lines(json.dumps(line) + "\n"))
    assert len(report.bad) == 1 and words in report.bad[0][1], report.bad
    assert await ltm.memories.count_documents({}) == 0
