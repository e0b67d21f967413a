"""Any interleaving of bumps leaves `Head.since` exact or None (red team of issue 38's text
format): bumps of one to more than CHANGES ids, ids of quotes, commas, backslashes, NULs and
non-ASCII text, bumps by a process of the previous version (its list), abandoned writes (the
jump past CHANGES) and erasures (the document deleted, `rev` from 0 again). A copy held at any
revision a reader could have seen is patched with exactly the ids changed since, or rebuilt."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import anyio
import pytest
from pymongo import AsyncMongoClient

from mongogate.indexing import CHANGES, LEASE, Coherence

pytestmark = pytest.mark.anyio

Mongo = AsyncMongoClient[dict[str, object]]

WEIRD = ['"', "\\", ",", '","', "é", "😀", "\u2028", "$x", "\x00", 'a\\","b', "[", "]", "{}", " ", ""]


@pytest.mark.parametrize("seed", range(4))
async def test_any_interleaving_of_bumps_names_exactly_the_changes_since_or_none(
    mongo: Mongo, db_name: str, seed: int
) -> None:
    rnd = random.Random(seed)
    coll = mongo[db_name]["revisions"]
    guard = Coherence(coll, db_name)
    hist: list[str | None] = []  # id per revision (None: unnamed)
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    n = 0
    seen = {0}
    for step in range(60):
        op = rnd.random()
        if op < 0.6:
            k = rnd.choice([1, 1, 2, 5, 50, 200, CHANGES, CHANGES + 1])
            ids = [
                rnd.choice(WEIRD) + str(rnd.randrange(4)) if rnd.random() < 0.5 else f"m{(n := n + 1)}"
                for _ in range(k)
            ]
            await guard.bump("s", *ids)
            hist += ids
        elif op < 0.7:
            k = rnd.choice([1, 3])
            ids = [f"o{(n := n + 1)}" for _ in range(k)]
            await coll.update_one(
                {"_id": "s"},
                {"$inc": {"rev": k}, "$push": {"changes": {"$each": ids, "$slice": -CHANGES}}},
                upsert=True,
            )
            hist += ids
        elif op < 0.8:
            await guard.begin("s", t0)
            head = await guard.read("s", now=t0 + LEASE)
            hist += [None] * (CHANGES + 1) * head.abandoned
        elif op < 0.85:
            await coll.delete_one({"_id": "s"})
            hist = []
            seen = {0}
        else:
            k = rnd.choice([1, 2])
            ids = [f"t{(n := n + 1)}" for _ in range(k)]
            token = await guard.begin("s", t0)
            await guard.bump("s", *ids, token=token)
            hist += ids
        head = await guard.read("s")
        assert head.rev == len(hist), (step, head)
        seen.add(len(hist))
        for h in sorted(seen):
            got = head.since(h)
            if got is not None:
                want = hist[h:]
                assert None not in want, (step, h)
                assert got == list(dict.fromkeys(want)), (step, h, got, want)


async def test_bumps_racing_from_four_clients_are_each_named_once(
    mongo: Mongo, db_name: str, engine_uri: str
) -> None:
    others: list[Mongo] = [AsyncMongoClient(engine_uri, tz_aware=True) for _ in range(4)]
    try:
        guards = [Coherence(c[db_name]["revisions"], db_name) for c in others]

        async def run(g: Coherence, w: int) -> None:
            for i in range(30):
                await g.bump("r", f"w{w}-{i}")

        async with anyio.create_task_group() as tg:
            for w, g in enumerate(guards):
                tg.start_soon(run, g, w)
        head = await guards[0].read("r")
        assert head.rev == 120
        assert sorted(head.since(0) or []) == sorted(f"w{w}-{i}" for w in range(4) for i in range(30))
    finally:
        for c in others:
            await c.close()
