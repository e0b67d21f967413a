"""Supersession without a model (`recall/chain.py`): a memory stated to replace older ones leaves
them out of recall by default, shows them marked with `include_superseded`, shows what was current
then with `as_of`, and keeps the rule through retries, forgets, expiry, flips back, cycles, keys
with versions, another scope's ids and documents of an earlier version."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongogate.clock import ManualClock
from mongogate.config import LimitsSettings, LongTermSettings
from mongogate.errors import InvalidInput, NotFound
from mongogate.recall.model import Link, MemoryScope
from mongogate.recall.store import LongTermMemory
from tests.recall.conftest import BrokenEmbedder

pytestmark = pytest.mark.anyio

ACME = MemoryScope("acme")
PARIS = "Alice lives in Paris."
BERLIN = "Alice moved to Berlin in March."
ROME = "Alice has moved on again and now lives in Rome."
WHERE = "Where does Alice live?"


async def texts(ltm: LongTermMemory, **args: Any) -> list[str]:
    got = await ltm.recall(ACME, WHERE, min_score=0, **args)
    return sorted(m.text for m in got.memories)


async def test_a_replaced_memory_is_left_out_shown_marked_and_listed(
    ltm: LongTermMemory, clock: ManualClock
) -> None:
    paris = await ltm.remember(ACME, PARIS)
    clock.advance(60)
    berlin = await ltm.remember(ACME, BERLIN, supersedes=paris.id)
    at = clock.now()
    assert berlin.supersedes == (Link(paris.id, at),)
    assert await texts(ltm) == [BERLIN]
    every = {
        m.text: m for m in (await ltm.recall(ACME, WHERE, min_score=0, include_superseded=True)).memories
    }
    assert every[PARIS].superseded_by == (Link(berlin.id, at),) and every[PARIS].supersedes == ()
    assert every[BERLIN].supersedes == (Link(paris.id, at),) and every[BERLIN].superseded_by == ()
    listed = {m.text: m for m in (await ltm.list(ACME)).memories}
    assert set(listed) == {PARIS, BERLIN}  # a listing shows everything stored, marked
    assert listed[PARIS].superseded_by == (Link(berlin.id, at),)
    h = await ltm.history(ACME, paris.id)
    assert h.superseded_by == (Link(berlin.id, at),) and h.supersedes == ()
    assert (await ltm.history(ACME, berlin.id)).supersedes == (Link(paris.id, at),)


async def test_as_of_shows_what_was_current_then(ltm: LongTermMemory, clock: ManualClock) -> None:
    before = clock.now() - timedelta(days=1)
    paris = await ltm.remember(ACME, PARIS)
    clock.advance(3600)
    in_paris = clock.now()
    clock.advance(3600)
    berlin = await ltm.remember(ACME, BERLIN, supersedes=paris.id)
    clock.advance(3600)
    await ltm.remember(ACME, ROME, supersedes=berlin.id)
    assert await texts(ltm, as_of=before) == []
    assert await texts(ltm, as_of=in_paris) == [PARIS]
    assert await texts(ltm, as_of=in_paris.isoformat()) == [PARIS]
    assert await texts(ltm, as_of=clock.now() - timedelta(minutes=30)) == [BERLIN]
    assert await texts(ltm, as_of=clock.now()) == [ROME] == await texts(ltm)
    marked = await ltm.recall(ACME, WHERE, min_score=0, as_of=in_paris, include_superseded=True)
    assert [(m.text, m.superseded_by) for m in marked.memories] == [(PARIS, ())]  # not yet replaced then


async def test_a_retry_changes_nothing_and_a_plain_remember_of_the_old_text_states_nothing(
    ltm: LongTermMemory, clock: ManualClock
) -> None:
    paris = await ltm.remember(ACME, PARIS)
    clock.advance(60)
    first = await ltm.remember(ACME, BERLIN, supersedes=[paris.id, paris.id])
    clock.advance(60)
    again = await ltm.remember(ACME, BERLIN, supersedes=paris.id)  # a retry after a lost reply
    assert again.supersedes == first.supersedes and again.status == "unchanged" and again.id == first.id
    assert (await ltm.remember(ACME, PARIS)).status == "unchanged"  # the old text said again: no statement
    assert await texts(ltm) == [BERLIN]
    assert await ltm.memories.count_documents({}) == 2


async def test_forgetting_or_expiry_of_the_newer_memory_makes_the_older_current_again(
    ltm: LongTermMemory, clock: ManualClock
) -> None:
    paris = await ltm.remember(ACME, PARIS)
    assert await texts(ltm) == [PARIS]  # the index is warm: it must see the links come and go
    clock.advance(60)
    berlin = await ltm.remember(ACME, BERLIN, supersedes=paris.id)
    assert await texts(ltm) == [BERLIN]
    assert await ltm.forget(ACME, id=berlin.id)
    assert await texts(ltm) == [PARIS]
    assert (await ltm.history(ACME, paris.id)).superseded_by == ()
    clock.advance(60)
    await ltm.remember(ACME, BERLIN, supersedes=paris.id, ttl_days=1)
    assert await texts(ltm) == [BERLIN]
    clock.advance(86400 + 1)
    assert await texts(ltm) == [PARIS]  # the newer one expired: nothing replaces it
    assert [m.superseded_by for m in (await ltm.list(ACME)).memories] == [()]


async def test_a_memory_forgotten_and_remembered_again_is_not_replaced_by_an_old_link(
    ltm: LongTermMemory, clock: ManualClock
) -> None:
    paris = await ltm.remember(ACME, PARIS)
    clock.advance(60)
    await ltm.remember(ACME, BERLIN, supersedes=paris.id)
    assert await ltm.forget(ACME, id=paris.id)
    clock.advance(60)
    again = await ltm.remember(ACME, PARIS)
    assert again.id == paris.id  # the same identity, the same id
    assert await texts(ltm) == sorted([BERLIN, PARIS])  # the old link's other half went with it


async def test_stating_an_old_fact_again_flips_back_and_no_cycle_hides_everything(
    ltm: LongTermMemory, clock: ManualClock
) -> None:
    paris = await ltm.remember(ACME, PARIS)
    clock.advance(60)
    berlin = await ltm.remember(ACME, BERLIN, supersedes=paris.id)
    clock.advance(60)
    back = await ltm.remember(ACME, PARIS, supersedes=berlin.id)  # a 2-cycle: the latest wins
    assert back.id == paris.id and await texts(ltm) == [PARIS]
    clock.advance(60)
    rome = await ltm.remember(ACME, ROME, supersedes=paris.id)
    clock.advance(60)
    await ltm.remember(ACME, BERLIN, supersedes=rome.id)  # Berlin -> Rome -> Paris -> Berlin
    assert await texts(ltm) == [BERLIN]
    clock.advance(60)
    await ltm.remember(ACME, PARIS, supersedes=berlin.id)  # and round again
    assert await texts(ltm) == [PARIS]
    assert len(await texts(ltm, include_superseded=True)) == 3


async def test_superseding_a_key_replaces_the_memory_and_a_new_version_states_it_again(
    ltm: LongTermMemory, clock: ManualClock
) -> None:
    v1 = await ltm.remember(ACME, "The team standup is at 9:00.", key="standup", namespace="team")
    clock.advance(60)
    await ltm.remember(ACME, "The team standup is at 9:30.", key="standup", namespace="team")
    clock.advance(60)
    new = await ltm.remember(
        ACME, "Standups are cancelled; we post async updates.", namespace="team", supersedes="standup"
    )
    assert new.supersedes[0].id == v1.id
    got = await ltm.recall(ACME, "when is the standup?", min_score=0)
    assert [m.id for m in got.memories] == [new.id]
    clock.advance(60)
    await ltm.remember(ACME, "The team standup is back, at 10:00.", key="standup", namespace="team")
    got = await ltm.recall(ACME, "when is the standup?", min_score=0)
    assert v1.id in [m.id for m in got.memories]  # its new text states it current again
    h = await ltm.history(ACME, v1.id)
    assert [v.version for v in h.versions] == [1, 2, 3] and h.superseded_by == ()


@pytest.mark.parametrize(
    ("supersedes", "error", "words"),
    [
        ("0" * 32, NotFound, "no memory"),
        ("no-such-key", NotFound, "no memory"),
        (["x"] * 11, InvalidInput, "a list of 1 to 10"),
        ([], InvalidInput, "a list of 1 to 10"),
        (["ok", 3], InvalidInput, "supersedes[1] must be"),
        ("bad\u0007key", InvalidInput, "control characters"),
        ({"id": "x"}, InvalidInput, "supersedes must be"),
    ],
)
async def test_a_refused_supersedes_stores_nothing(
    ltm: LongTermMemory, supersedes: object, error: type[Exception], words: str
) -> None:
    await ltm.remember(ACME, PARIS, key="ok")
    with pytest.raises(error, match=words.replace("[", r"\[")):
        await ltm.remember(ACME, BERLIN, supersedes=supersedes)
    assert await ltm.memories.count_documents({}) == 1


async def test_a_memory_cannot_replace_itself_nor_reach_another_scope(ltm: LongTermMemory) -> None:
    mine = await ltm.remember(ACME, PARIS, key="city")
    with pytest.raises(InvalidInput, match="is the memory being remembered"):
        await ltm.remember(ACME, BERLIN, key="city", supersedes="city")
    theirs = await ltm.remember(MemoryScope("globex"), "Globex's office is in Oslo.")
    alices = await ltm.remember(MemoryScope("acme", "alice"), "Alice's own note.")
    for other in (theirs.id, alices.id):
        with pytest.raises(NotFound) as refused:
            await ltm.remember(ACME, BERLIN, supersedes=other)
        assert other not in str(refused.value) or "no memory" in str(refused.value)
    assert (await ltm.history(ACME, mine.id)).versions[-1].text == PARIS
    assert await ltm.memories.count_documents({}) == 3


async def test_a_memory_stored_before_supersession_reads_as_current(ltm: LongTermMemory) -> None:
    old = await ltm.remember(ACME, PARIS)
    await ltm.memories.update_one(
        {"_id": old.id}, {"$unset": {"source": "", "occurred_at": "", "stated_at": "", "supersedes": ""}}
    )
    item = (await ltm.recall(ACME, WHERE, min_score=0)).memories[0]
    assert (item.text, item.supersedes, item.superseded_by, item.source, item.occurred_at) == (
        PARIS,
        (),
        (),
        None,
        None,
    )
    assert (await ltm.list(ACME)).memories[0].superseded_by == ()
    assert (await ltm.history(ACME, old.id)).superseded_by == ()
    clock_less = await ltm.remember(ACME, BERLIN, supersedes=old.id)  # and it can be replaced
    assert clock_less.supersedes[0].id == old.id and await texts(ltm) == [BERLIN]


async def test_the_search_index_path_leaves_replaced_memories_out_too(
    mongo: AsyncMongoClient[dict[str, object]], db_name: str, embedder: BrokenEmbedder, clock: ManualClock
) -> None:
    settings = LongTermSettings(vector_search="atlas", max_recall_limit=20, min_score=0.0)
    ltm = LongTermMemory(mongo[db_name], settings, embedder, clock, limits=LimitsSettings())
    await ltm.ensure_indexes()
    old = [await ltm.remember(ACME, f"Invoice {n} for Alice is due in Paris.") for n in range(3)]
    clock.advance(60)
    new = await ltm.remember(ACME, "Alice's invoices are now due in Berlin.", supersedes=[o.id for o in old])
    got = await ltm.recall(ACME, "Alice invoice due", method="text", limit=2)
    assert got.index_path == "text" and [m.id for m in got.memories] == [new.id]
    every = await ltm.recall(ACME, "Alice invoice due", method="text", limit=5, include_superseded=True)
    assert len(every.memories) == 4
    assert {m.id: [k.id for k in m.superseded_by] for m in every.memories if m.id != new.id} == {
        o.id: [new.id] for o in old
    }
    then = await ltm.recall(
        ACME, "Alice invoice due", method="text", limit=5, as_of=clock.now() - timedelta(seconds=1)
    )
    assert {m.id for m in then.memories} == {o.id for o in old}


@pytest.mark.parametrize("path", ["index", "text"])
async def test_both_rankers_mark_a_memory_with_a_newer_very_similar_one(
    mongo: AsyncMongoClient[dict[str, object]],
    db_name: str,
    embedder: BrokenEmbedder,
    clock: ManualClock,
    path: str,
) -> None:
    settings = LongTermSettings(vector_search="atlas" if path == "text" else "auto", min_score=0.0)
    ltm = LongTermMemory(mongo[db_name], settings, embedder, clock, limits=LimitsSettings())
    await ltm.ensure_indexes()
    paris = await ltm.remember(ACME, PARIS)
    await ltm.remember(ACME, "The cat is called Miso and eats salmon.")
    clock.advance(60)
    berlin = await ltm.remember(ACME, "Alice now lives in Berlin.")
    method: Any = "text" if path == "text" else "fused"
    got = await ltm.recall(ACME, "Alice lives", method=method, limit=5)
    assert got.index_path == path
    marks = {m.id: m.newer_similar for m in got.memories}
    mark = marks[paris.id]
    assert mark is not None and mark.id == berlin.id and mark.score >= settings.similar_min_score
    assert marks[berlin.id] is None  # nothing newer is like it
    await ltm.remember(ACME, "Alice now lives in Berlin.", supersedes=paris.id)
    every = await ltm.recall(ACME, "Alice lives", method=method, limit=5, include_superseded=True)
    assert {m.id: m.newer_similar is not None for m in every.memories if m.id in (paris.id, berlin.id)} == {
        paris.id: True,  # still a look-alike of the newer one; superseded_by says it is settled
        berlin.id: False,
    }
