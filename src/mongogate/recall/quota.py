"""`max_per_scope` without counting the collection on every write.

The scope's revision document (`memory_revisions`, `indexing/coherence.py`) carries `held`, an upper
bound of the memories the scope stores: raised BEFORE a memory is created (a reservation),
lowered after a create that did not happen (a duplicate) and in the same update as the revision
bump after a memory was deleted (forget, an expired memory erased). A crash between a write and
its counter update leaves the counter too high, never too low. TTL expiry deletes memories without
telling anyone, so the counter drifts up; when a reservation would pass `max_per_scope`, or the
scope was never counted (`counted` missing: a database of an older version, or a new scope), the
scope is counted exactly (one read of its `expires_at`, a scan, near the limit only) and the counter
set to what is stored plus the reservation. Two creates racing at the limit can both pass (the
recount does not see an insert still in flight), as two `count_documents` could before.

A scope at its limit would then be counted at every write (a scan: 0.5-1.2 s at 10,000
memories, issue 38), each keyed update included, since create-first reserves a place before it
knows the memory is there. So the last count is kept (`count`: the live memories it found,
`alive`; the scope's `moves` it was taken at; `until`, the first expiry among those memories, at
most `RECOUNT` after the count) and answers every reservation past the limit with no scan while
it holds: its `moves` equal the scope's and `until` is not reached. Every write keeps it in step
in its revision bump (`moved`, through `RecallRepository.changed`): a create or a delete of a
live memory moves both `moves` and adds to `alive`; a write whose effect is not known (a bulk
insert) moves the scope's `moves` alone (the count is no longer trusted); an expiry set lowers
`until` to it (`$min`). A count reads the scope's `moves` before its scan, so a create or delete
that lands meanwhile leaves the two apart: counted again next time. A TTL expiry comes at or after
`until`, so never inside a kept count. What the kept count can miss, until `RECOUNT`: a process
killed between its insert and its bump (a memory it does not hold: one past the limit at most,
as two creates racing at the limit), and a create whose insert the scan saw but whose bump came
after the count (held twice: one place refused that was free).
"""

from __future__ import annotations

from datetime import datetime

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection

from mongogate.clock import as_utc
from mongogate.indexing import LEASE, born
from mongogate.recall import documents as rd
from mongogate.recall.documents import CountDoc
from mongogate.recall.model import MemoryScope, scope_key
from mongogate.values import Doc

#: a kept count is trusted at most this long (module docstring)
RECOUNT = LEASE


async def reserve(
    revisions: AsyncCollection[Doc],
    memories: AsyncCollection[Doc],
    scope: MemoryScope,
    n: int,
    limit: int,
    now: datetime,
) -> tuple[int, int]:
    """Room for `n` new memories: (how many of them fit, the live memories held when counted, or -1
    when not counted). The ones that do not fit are released before this returns."""
    if n <= 0:
        return 0, -1
    key = scope_key(scope)
    doc = await revisions.find_one_and_update(
        {"_id": key},
        {"$inc": {rd.HELD: n}, **born()},
        projection={rd.HELD: 1, rd.COUNTED: 1, rd.MOVES: 1, rd.COUNT: 1},
        upsert=True,
        return_document=ReturnDocument.AFTER,
    )
    held = int(doc[rd.HELD]) if doc is not None and rd.HELD in doc else n
    if doc is not None and doc.get(rd.COUNTED) is True and held <= limit:
        return n, -1
    kept = _kept(doc, now)
    if kept is not None:  # past the limit, and the last count still holds: no scan
        room = max(min(n, limit - kept), 0)
        await release(revisions, scope, n - room)
        return room, kept
    stored, alive, until = await _count(memories, scope, now)
    room = max(min(n, limit - alive), 0)
    count: CountDoc = {"moves": _moves(doc), "alive": alive, "until": until}
    # what is stored now plus what this call keeps; a concurrent reservation since the read above
    # is kept by the relative $inc
    await revisions.update_one(
        {"_id": key},
        {"$inc": {rd.HELD: stored + room - held}, "$set": {rd.COUNTED: True, rd.COUNT: count}},
    )
    return room, alive


def _moves(doc: Doc | None) -> int:
    return int((doc or {}).get(rd.MOVES) or 0)


def _kept(doc: Doc | None, now: datetime) -> int | None:
    """The live memories the scope's last count found, while it holds (module docstring)."""
    count = (doc or {}).get(rd.COUNT)
    if not isinstance(count, dict) or (doc or {}).get(rd.COUNTED) is not True:
        return None
    until = count.get("until")
    if count.get("moves") != _moves(doc) or not isinstance(until, datetime) or as_utc(until) <= now:
        return None
    return int(count["alive"])


def moved(alive: int | None, expiring: datetime | None) -> tuple[dict[str, int], dict[str, datetime]]:
    """The part of a revision bump (`$inc`, `$min`) that keeps the scope's kept count in step with
    a write (module docstring): one that added or removed a live memory (`alive` +1 / -1) moves
    the scope and the count together (a count being taken meanwhile is then not trusted); one
    whose effect on the live memories is not known (`alive` None) moves the scope alone; an expiry
    it set (`expiring`) lowers the count's `until` to it."""
    inc: dict[str, int] = {}
    if alive is None:
        inc[rd.MOVES] = 1
    elif alive:
        inc |= {rd.MOVES: 1, f"{rd.COUNT}.moves": 1, f"{rd.COUNT}.alive": alive}
    return inc, ({} if expiring is None else {f"{rd.COUNT}.until": expiring})


async def release(revisions: AsyncCollection[Doc], scope: MemoryScope, n: int) -> None:
    """Give back `n` reserved places whose memories were not created."""
    if n > 0:
        await revisions.update_one({"_id": scope_key(scope)}, {"$inc": {rd.HELD: -n}})


async def _count(
    memories: AsyncCollection[Doc], scope: MemoryScope, now: datetime
) -> tuple[int, int, datetime]:
    """(memories stored in the scope, of which live, the first expiry among the live ones; `now`
    plus `RECOUNT` when none expires sooner)."""
    stored = alive = 0
    first = now + RECOUNT
    async for d in memories.find(scope.match(), {rd.EXPIRES_AT: 1}):
        stored += 1
        exp = d.get(rd.EXPIRES_AT)
        if exp is None or as_utc(exp) > now:
            alive += 1
            first = first if exp is None else min(first, as_utc(exp))
    return stored, alive, first
