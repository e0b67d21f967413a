"""The revision protocol: in-process copies of a collection's documents, kept coherent across
server processes by the database. Generic over what it guards: a string key per scope (the
documents one copy holds) and the ids of the documents a write changed.

Every write of a scope's documents (for long-term memory: remember, forget, an expiry set, an
expired memory erased, a re-embedding) is bracketed by the scope's revision document (`_id` = the
key, in the guard's own revisions collection), each step one update by `_id` (flat on the
embedded engine):

- `begin` before the write: `pending.<token>: now` (a write in flight);
- `bump` after it, before the call answers: `rev + 1` per document written, the ids written
  named (at least the last CHANGES, below), and the token unset (`bump(..., token=)`). `writing`
  is both around a block, with the write signal held.

A reader (`refresh`) reads that document by `_id` first, then:

- same revision as its copy: the copy answers;
- newer by at most CHANGES, and every change since still named: the copy re-reads only those
  documents by `_id` (its `patch`; gone ones are removed);
- else (first use, evicted, too far behind, not of this shape: `fits`): the scope is read whole
  (its `rebuild`).

The ids are named as text, not as a list (issue 38): on the embedded engine every update of a
document costs per value it holds (each encoded, validated and copied), whatever the update
touches, so a list of the last 256 ids made each of a keyed remember's four updates of its
revision document (begin, the quota's reservation, the bump, the end) 2-3x dearer once a scope
had seen 256 writes. `recent` holds the newest ids, each JSON-encoded and followed by ",",
`recent_n` how many; a bump that would take it past CHANGES moves it to `earlier` (dropping the
text there) and starts it again, so the document names between CHANGES and 2 x CHANGES changes in
two values, whatever its history. That append is one pipeline update (`$concat` under `$cond`);
a bump of more than CHANGES ids names none. A document of the previous version (its `changes`
list of the last 256 ids) is still read by that list, and the next bump unsets it and starts the
texts from its own ids (`named`, `_bumped`); a process of the previous version reads a document
without the list as naming nothing, so it rebuilds.

The revision is read BEFORE the documents, so a copy is never labelled newer than what it holds.
With no write in flight at that read, every write that happened before it has bumped the
revision, so the copy, once patched, holds every document as the database does: the reader may
answer from it (`Refreshed.settled`). With a write in flight (between its `begin` and its
`bump`, or its process died there), the reader reads its results back by `_id` (`read_by_id`)
and the database decides. A token older than LEASE (by the injectable clock) is taken as
abandoned: it is unset and the revision jumped past CHANGES, so every process's copy is read
whole once.

On the embedded engine, every process is on the engine's machine, and the write signal
(`engine/write_signal.py`) lets a reader skip the revision read: each bracketed write also moves
its key's counter in a shared file and holds a lock there while in flight; a reader that finds no
write in flight and the counter where it was at its last settled revision read answers from its
copy without reading (the `stamp` it passes to `refresh`; outcome "unread").

## Two indexes on the same mechanism

Long-term memory's per-scope index (`recall/inprocess/cache.py`) is the first user: its keys are
`recall.model.scope_key`, its revisions collection `memory_revisions`, its kind "" (the signal keys
written before this module existed). Conversation messages' index for `search_messages`
(`memory/message_index.py`) is the second, with no copy of the protocol:

1. one `Coherence(db["message_revisions"], db.name, WriteSignal.of(db.client), kind="msg:")` per
   database: its own revisions collection (its revision documents never mix with another's) and
   its own `kind`, so its signal counters are never another index's;
2. every writer of the guarded documents: `async with guard.writing(key, now): <write>; await
   guard.bump(key, *ids_written)` (a `MongogateError` or the `ends_on` exceptions end the block as
   bumped; anything else leaves it in flight for the LEASE);
3. its reader holds copies with a mutable `rev` and `verified` (`Held`), and calls
   `await guard.refresh(key, held, fits=..., patch=..., rebuild=..., now=..., stamp=guard.stamp(key))`:
   the copy it gets back is fresh as of the revision read, `settled` says whether it may answer
   from it, and `outcome` what it cost (for its own counters). While not settled, it reads its
   results back with `read_by_id` and checks them against its own filter.

A third would do the same. The change ids a `bump` names are opaque here: each reader's `patch`
decides what one means (a message's `_id`, or `s:<session>` for a whole session erased).
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, Literal, Protocol, TypeVar

from pymongo.asynchronous.collection import AsyncCollection

from mongogate.clock import SYSTEM_CLOCK, Clock, as_utc
from mongogate.engine.write_signal import WriteSignal
from mongogate.errors import MongogateError
from mongogate.values import Doc

log = logging.getLogger(__name__)

__all__ = [
    "CHANGES",
    "LEASE",
    "Coherence",
    "Head",
    "Held",
    "Outcome",
    "Refreshed",
    "born",
    "named",
    "read_by_id",
]

#: how far behind (in revisions) a copy may be and still be patched: the revision document names
#: at least its last CHANGES changes (and at most twice as many); a copy further behind is rebuilt
CHANGES = 256
#: the revision document's fields naming the changed ids (module docstring): the newest changes
#: as text (each id JSON-encoded and followed by ","), how many it names, and the text before it
RECENT, RECENT_N, EARLIER = "recent", "recent_n", "earlier"
#: where the previous version named them: a list of the last CHANGES ids (still read)
LISTED = "changes"
#: a write in flight longer than this is taken as abandoned (its process died between its
#: write and its bump); far longer than any write takes
LEASE = timedelta(minutes=5)

#: what a refresh cost: no read ("unread", the write signal), the revision read only ("fresh"),
#: the changed documents re-read ("patched"), or the scope read whole ("rebuilt")
Outcome = Literal["unread", "fresh", "patched", "rebuilt"]
Stamp = tuple[int, int]
#: what the revision read asks for: the whole document but the quota's fields
_HEAD: Doc = {"rev": 1, "born": 1, "pending": 1, RECENT: 1, EARLIER: 1, LISTED: 1}


class Held(Protocol):
    """A reader's copy of one scope: the revision it holds, the incarnation of the revision
    document it was read at and the write signal's stamp it was verified at (all set by
    `refresh`), and how many documents it holds."""

    rev: int
    born: object
    verified: Stamp | None

    def __len__(self) -> int: ...


H = TypeVar("H", bound=Held)


@dataclass(frozen=True)
class Head:
    """A scope's revision document as a reader found it."""

    rev: int
    #: the last changed ids the document names, oldest first
    changes: tuple[str, ...]
    #: a write was in flight at the read
    pending: bool
    #: writes in flight past LEASE that this read ended
    abandoned: int = 0
    #: the revision document's incarnation (`born`); None when there is no document
    born: object = None
    #: a revision document exists (none: the scope was never written, or was erased)
    exists: bool = False

    def since(self, held: int) -> list[str] | None:
        """The ids changed since revision `held` (each once, in order); None when this head no
        longer names them all (or `held` is newer): the copy is read whole."""
        behind = self.rev - held
        if behind < 0 or behind > min(len(self.changes), CHANGES):
            return None
        return list(dict.fromkeys(self.changes[len(self.changes) - behind :]))


@dataclass(frozen=True)
class Refreshed(Generic[H]):
    """A copy fresh as of the revision just read (or unread: the signal did not move)."""

    held: H
    outcome: Outcome
    #: no write in flight: the copy holds what the database does (no read-back needed)
    settled: bool
    #: writes in flight past LEASE that this refresh ended
    abandoned: int = 0


def born() -> Doc:
    """What every write that may create a revision document adds: its incarnation, new each time
    the document is created. An erasure deletes the document (its `_id` names the tenant) and
    `rev` then counts again from 0: a copy of the erased documents must not take a later revision
    of the same number for its own (`refresh` compares incarnations)."""
    return {"$setOnInsert": {"born": uuid.uuid4().hex}}


def named(doc: Doc) -> tuple[str, ...]:
    """The changed ids a revision document names, oldest first: its list, when a process of the
    previous version wrote one (left by it, or bumped by it since this version's last bump, which
    unsets the list: what the list names is then all that is known to be in order), else its
    texts (`_bumped`)."""
    listed = doc.get(LISTED)
    if isinstance(listed, list):
        return tuple(str(c) for c in listed)
    return _ids(doc.get(EARLIER)) + _ids(doc.get(RECENT))


def _ids(text: object) -> tuple[str, ...]:
    if not isinstance(text, str) or not text.endswith(","):
        return ()
    return tuple(str(i) for i in json.loads(f"[{text[:-1]}]"))


def _bumped(
    ids: tuple[str, ...], inc: Mapping[str, int], least: Mapping[str, object], token: str | None
) -> list[Doc]:
    """`bump`'s update, one pipeline: `rev` + len(ids), the ids appended to `recent` as text (one
    value, where a list of CHANGES ids was CHANGES values: on the embedded engine every update of
    the document costs per value it holds), rolled into `earlier` (the text before it dropped)
    once `recent` would name more than CHANGES, so the document names between CHANGES and twice
    as many; more than CHANGES in one bump name none (every copy behind it rebuilds). The previous
    version's list is unset, and a document still holding one starts again from these ids (`named`
    never joins the two). `inc` and `least` as `$inc` and `$min` would, `born` as `$setOnInsert`."""
    k = len(ids)
    fields: Doc = {
        "rev": {"$sum": ["$rev", k]},
        "born": {"$ifNull": ["$born", {"$literal": uuid.uuid4().hex}]},
    }
    if k > CHANGES:
        fields |= {EARLIER: "", RECENT: "", RECENT_N: 0}
    else:
        text = {"$literal": "".join(json.dumps(i) + "," for i in ids)}
        listed = {"$isArray": f"${LISTED}"}
        roll = {"$or": [listed, {"$gt": [{"$sum": [f"${RECENT_N}", k]}, CHANGES]}]}
        fields |= {
            EARLIER: {"$cond": [listed, "", {"$cond": [roll, f"${RECENT}", f"${EARLIER}"]}]},
            RECENT: {"$cond": [roll, text, {"$concat": [{"$ifNull": [f"${RECENT}", ""]}, text]}]},
            RECENT_N: {"$cond": [roll, k, {"$sum": [f"${RECENT_N}", k]}]},
        }
    fields |= {f: {"$sum": [f"${f}", n]} for f, n in inc.items()}
    fields |= {f: {"$min": [f"${f}", {"$literal": v}]} for f, v in least.items()}
    return [{"$set": fields}, {"$unset": [LISTED] if token is None else [LISTED, f"pending.{token}"]}]


async def read_by_id(coll: AsyncCollection[Doc], ids: list[str], fields: Doc) -> dict[str, Doc]:
    """The documents of `ids`, one `find_one` by `_id` each: on the embedded engine that stays
    flat in the collection's size (1-6 ms at 10,000 documents) where `{_id: {$in: ids}}` and any
    filter beside `_id` scan (0.2-1.9 s; docs/decisions/recall-index.md)."""
    out: dict[str, Doc] = {}
    for mid in ids:
        doc = await coll.find_one({"_id": mid}, fields)
        if doc is not None:
            out[mid] = doc
    return out


class Coherence:
    """The revision protocol over one revisions collection, for every scope key of a database."""

    def __init__(
        self,
        revisions: AsyncCollection[Doc],
        database: str,
        signal: WriteSignal | None = None,
        *,
        kind: str = "",
    ) -> None:
        self.revisions = revisions
        #: the database's name: part of every signal key (one engine serves several databases)
        self.database = database
        #: the engine's write signal, None where there is none (TCP, a remote MongoDB): then
        #: every reader reads the revision
        self.signal = signal
        #: what this guard's signal keys start with (another index's never meet these)
        self.kind = kind

    # -- writers --------------------------------------------------------------------------------

    def signal_key(self, key: str) -> str:
        """The key as the write signal knows it: with the database's name, so the same scope in
        two databases of one engine (tests, two deployments) does not share a counter."""
        return f"{len(self.database)}:{self.database}:{self.kind}{key}"

    @contextlib.asynccontextmanager
    async def announcing(self, *keys: str, clock: Clock = SYSTEM_CLOCK) -> AsyncIterator[None]:
        """Around a whole bracketed write of `keys` (`writing`, a re-embedding batch): in flight
        for every process's write signal until the block ends. Its locks are waited for on
        `clock`, never inside the event loop (engine/write_signal.py)."""
        if self.signal is None:
            yield
            return
        async with self.signal.writing(*(self.signal_key(key) for key in keys), clock=clock):
            yield

    async def begin(self, key: str, now: datetime) -> str:
        """Before a write of the scope's documents: the write is in flight (readers read their
        results back until it ends). Returns the token to pass to `bump`."""
        token = uuid.uuid4().hex
        await self.revisions.update_one(
            {"_id": key}, {"$set": {f"pending.{token}": now}, **born()}, upsert=True
        )
        return token

    async def bump(
        self,
        key: str,
        *ids: str,
        token: str | None = None,
        inc: Mapping[str, int] | None = None,
        least: Mapping[str, object] | None = None,
    ) -> None:
        """The scope's revision + 1 per document that changed, naming each (one change per
        revision is what a patch reads), and the write `token` (from `begin`) no longer in flight.
        A bulk write names many in one update; more than `CHANGES` name none (every copy behind
        it rebuilds). `inc`: other counters of the revision document moved in the same update,
        `least`: other fields lowered to at most these values (as `$min`); with `ids` only
        (long-term memory's quota, `recall/quota.py`). With `ids`, one pipeline update
        (`_bumped`: the ids are appended to a text, module docstring)."""
        if ids:
            pipeline = _bumped(ids, inc or {}, least or {}, token)
            await self.revisions.update_one({"_id": key}, pipeline, upsert=True)
        elif token is not None:
            await self.revisions.update_one(
                {"_id": key}, {"$unset": {f"pending.{token}": ""}, **born()}, upsert=True
            )

    @contextlib.asynccontextmanager
    async def writing(
        self,
        key: str,
        now: datetime,
        ends_on: tuple[type[BaseException], ...] = (MongogateError,),
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> AsyncIterator[None]:
        """Around every write of the scope's documents (each followed by `bump` inside): in flight
        for every process's reader until the block ends. Ended on success and on `ends_on` (by
        default a refusal, raised before a write or after its bump); any other exception (a lost
        connection, the process stopped) leaves it in flight, which readers take as abandoned
        after LEASE. The write signal's locks are waited for on `clock`."""
        async with self.announcing(key, clock=clock):
            token = await self.begin(key, now)
            try:
                yield
            except ends_on:
                await self.bump(key, token=token)
                raise
            await self.bump(key, token=token)

    # -- readers --------------------------------------------------------------------------------

    def stamp(self, key: str) -> Stamp | None:
        """The write signal's (epoch, counter) of `key` when no write of it is in flight; None
        when there is no signal or a write is in flight (then the revision is read). Taken BEFORE
        the revision read it is passed to."""
        return None if self.signal is None else self.signal.stamp(self.signal_key(key))

    async def read(self, key: str, *, now: datetime | None = None) -> Head:
        """The scope's revision document (one read by `_id`), with the writes in flight past LEASE
        (by `now`; None never takes one as abandoned) ended first: unset, and the revision jumped
        past CHANGES, so every process's copy is read whole once, then trusted again."""
        doc = await self.revisions.find_one({"_id": key}, _HEAD)
        pending = _pending(doc)
        abandoned = [t for t, at in pending.items() if _expired(at, now)]
        if abandoned:
            log.warning("coherence: %d write(s) in scope %s never ended; rebuilding", len(abandoned), key)
            await self.revisions.update_one(
                {"_id": key},
                {"$unset": {f"pending.{t}": "" for t in abandoned}, "$inc": {"rev": CHANGES + 1}},
            )
            doc = await self.revisions.find_one({"_id": key}, _HEAD)
            pending = _pending(doc)
        if doc is None:
            return Head(0, (), False, len(abandoned))
        rev = int(doc.get("rev") or 0)
        return Head(rev, named(doc), bool(pending), len(abandoned), doc.get("born"), exists=True)

    async def refresh(
        self,
        key: str,
        held: Callable[[], H | None],
        *,
        fits: Callable[[H], bool],
        patch: Callable[[H, list[str]], Awaitable[None]],
        rebuild: Callable[[int], Awaitable[H]],
        now: datetime | None,
        stamp: Stamp | None,
    ) -> Refreshed[H]:
        """The copy of `key` fresh as of the revision read now: the copy `held()` returns as it is
        (the signal did not move since it was verified at `stamp`, or the revision did not),
        patched with the changed ids, or rebuilt at the revision read. `held` is asked again after
        the read (another reader may have replaced the copy meanwhile). `fits`: a copy is of the
        shape wanted (another model: rebuilt). `stamp` (from `stamp`, taken before; None: read
        the revision)."""
        known = held()
        if stamp is not None and known is not None and _verified(known, fits, stamp):
            return Refreshed(known, "unread", True)
        head = await self.read(key, now=now)
        current = held()
        current = current if current is not None and _usable(current, head, fits) else None
        changed = None if current is None else head.since(current.rev)
        outcome: Outcome
        if current is not None and changed is not None:
            outcome = "patched" if changed else "fresh"
            if changed:
                await patch(current, changed)
                current.rev = head.rev
        else:
            current = await rebuild(head.rev)
            outcome = "rebuilt"
        current.born = head.born
        # taken before the read that found no write in flight: trusted until the signal moves
        current.verified = None if head.pending else stamp
        return Refreshed(current, outcome, not head.pending, head.abandoned)


def _usable(held: H, head: Head, fits: Callable[[H], bool]) -> bool:
    """A copy the revision just read may bring up to date: of the shape wanted, not newer than the
    revision, of the same incarnation of the revision document (an erasure between makes another),
    and holding nothing when there is no document (erased since it was read)."""
    same_document = held.born == head.born and (head.exists or len(held) == 0)
    return fits(held) and held.rev <= head.rev and same_document


def _verified(held: H, fits: Callable[[H], bool], stamp: Stamp) -> bool:
    """No write of the scope began or ended since a settled read of `held`, and none is in flight."""
    return held.verified == stamp and fits(held)


def _pending(doc: Doc | None) -> dict[str, object]:
    pending = doc.get("pending") if doc else None
    return pending if isinstance(pending, dict) else {}


def _expired(at: object, now: datetime | None) -> bool:
    return now is not None and isinstance(at, datetime) and as_utc(at) + LEASE <= now
