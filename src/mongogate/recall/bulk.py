"""Bulk import and export of one scope's memories as JSON lines (`mongogate memory import|export`).

A line is `{"text", "namespace"?, "key"?, "metadata"?, "ttl_days"?}` and what `recall/portable.py`
adds (`occurred_at`, `source`, `supersedes`, `superseded_by`, `stated_at`), checked like
`remember`'s arguments. Import works in batches, in the shapes the embedded engine serves flat whatever the
collection's size (recall/ids.py): every line's version 1 is built under its derived `_id` (the
batch's texts embedded in one call), their places reserved in the scope's quota counter at once
(recall/quota.py), and they are written with one unordered `insert_many`; a duplicate `_id` is a
memory already there, read by `_id` and compared (a read that finds nothing would scan the
collection there). A second import of the same file writes nothing: all `unchanged`. Anything
else (a changed text, a new expiry, a line whose memory another writer created meanwhile, the
same key twice in a batch) goes through `remember` itself, so the rules of versions and history
are the store's, not a copy of them. A bad line is reported by number and skipped; nothing else is lost.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import IO, Any

from pymongo import ASCENDING
from pymongo.errors import BulkWriteError, PyMongoError

from mongogate.clock import as_utc
from mongogate.errors import InvalidInput, MongogateError, QuotaExceeded, StorageError
from mongogate.recall import checks, portable, quota
from mongogate.recall import documents as rd
from mongogate.recall.ids import IDENTITY_FIELDS, in_scope, memory_id
from mongogate.recall.model import MemoryScope, scope_key
from mongogate.recall.store import LongTermMemory, identity, text_hash
from mongogate.values import Doc

FIELDS = frozenset({"text", "namespace", "key", "metadata", "ttl_days"}) | portable.FIELDS
#: what a line may hold beyond the text limit (JSON escapes, metadata, the other fields)
LINE_SLACK = 16 * 1024
#: the largest file import reads
MAX_FILE_BYTES = 1024**3
BATCH = 256
#: the author of imported memories when no subject is given
IMPORT_AUTHOR = "cli:import"


@dataclass(frozen=True)
class Line:
    number: int
    text: str
    namespace: str
    key: str | None
    metadata: Doc
    ttl_days: int | None
    #: source, occurred_at and the memory's links (`recall/portable.py`)
    extras: portable.Extras = field(default_factory=lambda: portable.Extras(checks.check_told(None, None)))


@dataclass
class ImportReport:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    #: (line number, why), in file order
    bad: list[tuple[int, str]] = field(default_factory=list)

    @property
    def done(self) -> int:
        return self.created + self.updated + self.unchanged

    def counts(self) -> dict[str, int]:
        return {
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "bad": len(self.bad),
        }


def max_line_bytes(store: LongTermMemory) -> int:
    return store.settings.max_text_bytes + LINE_SLACK


def read_lines(stream: IO[bytes], limit: int) -> Iterator[tuple[int, bytes | str]]:
    """(line number, raw line) or (line number, why it is bad) for a line over `limit` bytes;
    blank lines are skipped. A long line is never held whole: the rest is read and dropped."""
    number = 0
    while True:
        raw = stream.readline(limit + 1)
        if not raw:
            return
        number += 1
        if len(raw) > limit and not raw.endswith(b"\n"):
            while True:  # drop the rest of the line
                more = stream.readline(64 * 1024)
                if not more or more.endswith(b"\n"):
                    break
            yield number, f"line is longer than {limit} bytes"
            continue
        if raw.strip():
            yield number, raw


def parse(number: int, raw: bytes, store: LongTermMemory) -> Line:
    """One line, checked like remember's arguments; InvalidInput says what is wrong."""
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidInput(f"not JSON ({e})") from None
    except RecursionError:  # a line of thousands of nested brackets, inside the line limit
        raise InvalidInput("not JSON a memory can hold: nested too deeply") from None
    if not isinstance(value, dict):
        raise InvalidInput("not a JSON object")
    unknown = sorted(set(value) - FIELDS)
    if unknown:
        raise InvalidInput(f"unknown field(s) {', '.join(map(repr, unknown))}; use {sorted(FIELDS)}")
    ns = value.get("namespace")
    key = value.get("key")
    return Line(
        number=number,
        text=checks.check_text(value.get("text"), store.settings),
        namespace=checks.check_namespace(checks.DEFAULT_NAMESPACE if ns is None else ns),
        key=None if key is None else checks.check_key(key),
        metadata=checks.check_metadata(value.get("metadata"), store.limits),
        ttl_days=checks.check_ttl(value.get("ttl_days"), store.settings),
        extras=portable.parse(value),
    )


async def import_lines(
    store: LongTermMemory,
    scope: MemoryScope,
    lines: Iterable[tuple[int, bytes | str]],
    *,
    author: str | None = IMPORT_AUTHOR,
    batch: int = BATCH,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Import `lines` (from `read_lines`) into `scope`; `progress(n)` after each batch of n lines."""
    report = ImportReport()
    chunk: list[Line] = []
    for number, raw in lines:
        if isinstance(raw, str):
            report.bad.append((number, raw))
            continue
        try:
            chunk.append(parse(number, raw, store))
        except InvalidInput as e:
            report.bad.append((number, str(e)))
            continue
        if len(chunk) >= batch:
            await _import_batch(store, scope, chunk, author, report)
            if progress is not None:
                progress(len(chunk))
            chunk = []
    if chunk:
        await _import_batch(store, scope, chunk, author, report)
        if progress is not None:
            progress(len(chunk))
    report.bad.sort()
    return report


async def _import_batch(
    store: LongTermMemory, scope: MemoryScope, chunk: list[Line], author: str | None, report: ImportReport
) -> None:
    idents = [identity(scope, ln.namespace, ln.key, text_hash(ln.text)) for ln in chunk]
    now = store.clock.now()
    firsts: list[tuple[Line, Doc]] = []  # one line per memory; a repeat in the batch through remember
    slow: list[Line] = []  # through remember: changed, re-expired, repeated in this batch
    seen: set[str] = set()
    for line, ident in zip(chunk, idents, strict=True):
        mid = memory_id(ident)
        (slow.append(line) if mid in seen else firsts.append((line, ident)))
        seen.add(mid)
    if store.legacy:  # uuid ids left: read first (by query), so no second memory is made
        firsts = await _legacy_firsts(store, scope, firsts, slow, report)
    else:  # the batch's stored memories in one read by `_id`: a re-run writes nothing for them
        firsts = await _unstored(store, scope, firsts, slow, report)
    # create first: a duplicate `_id` is a memory already there (read by `_id` after, a hit); a
    # read that finds nothing would scan the collection on the embedded engine
    held, over = await _insert(store, scope, await _documents(store, firsts, now, author, scope), now, report)
    slow += await _not_created(store, scope, held, over, report)
    await _through_remember(store, scope, sorted(slow, key=lambda ln: ln.number), author, report)


async def _unstored(
    store: LongTermMemory,
    scope: MemoryScope,
    firsts: list[tuple[Line, Doc]],
    slow: list[Line],
    report: ImportReport,
) -> list[tuple[Line, Doc]]:
    """The lines whose memory is not stored, from one read of the batch's derived ids
    (`{_id: {$in}}`: primary-key reads on the embedded engine, 50-120 ms for 256 at 10,000
    memories; an index lookup on MongoDB). The stored ones are compared (`_compare`: unchanged
    lines write nothing, the changed ones go to `slow`). An unchanged line is named to every
    process's index only when a write of the scope was in flight at the revision read before the
    documents (`recall/coherence.py`): a killed import's last batch, inserted but never bumped, is
    then seen by the re-run's bump; with none in flight, every stored memory was bumped already."""
    if not firsts:
        return []
    ids = [memory_id(ident) for _, ident in firsts]
    try:
        head = await store.coherence.read(scope_key(scope))  # before the documents
        found = store.memories.find({"_id": {"$in": ids}}, _FIELDS)
        stored = {str(d["_id"]): d async for d in found if in_scope(d, scope)}
    except PyMongoError as e:
        raise StorageError("could not read the memories being imported") from e
    pairs = [(line, stored[mid]) for (line, _), mid in zip(firsts, ids, strict=True) if mid in stored]
    changed = _compare(pairs, report, scope)
    slow += changed
    if head.pending:
        again = {line.number for line in changed}
        await _name_unchanged(store, scope, [str(d["_id"]) for line, d in pairs if line.number not in again])
    return [pair for pair, mid in zip(firsts, ids, strict=True) if mid not in stored]


async def _name_unchanged(store: LongTermMemory, scope: MemoryScope, ids: list[str]) -> None:
    """Bump the scope's revision naming `ids` (stored memories written by nothing in this run), as
    an `unchanged` remember does."""
    if not ids:
        return
    try:
        async with store.writing(scope):
            await store.changed(scope, *ids)
    except PyMongoError as e:
        raise StorageError("could not store the imported memories") from e


async def _legacy_firsts(
    store: LongTermMemory,
    scope: MemoryScope,
    firsts: list[tuple[Line, Doc]],
    slow: list[Line],
    report: ImportReport,
) -> list[tuple[Line, Doc]]:
    """The lines whose memory is not stored under any id (read by identity); the stored ones are
    compared (`_compare`), the changed ones added to `slow`."""
    try:
        found = [await store.lookup(scope, ident, _FIELDS) for _, ident in firsts]
    except PyMongoError as e:
        raise StorageError("could not read the memories being imported") from e
    held = [(ln, d) for (ln, _), d in zip(firsts, found, strict=True) if d is not None]
    slow += _compare(held, report, scope)
    return [pair for pair, d in zip(firsts, found, strict=True) if d is None]


async def _not_created(
    store: LongTermMemory,
    scope: MemoryScope,
    held: list[tuple[Line, Doc]],
    over: list[tuple[Line, Doc]],
    report: ImportReport,
) -> list[Line]:
    """The lines whose insert found a memory there (`held`) or did not fit the quota (`over`),
    read by `_id`: counted unchanged, refused past the quota, or returned for remember."""
    try:
        found = [await store.lookup(scope, _ident(doc), _FIELDS) for _, doc in held + over]
    except PyMongoError as e:
        raise StorageError("could not read the memories being imported") from e
    slow: list[Line] = []
    for i, ((line, _), doc) in enumerate(zip(held + over, found, strict=True)):
        if doc is not None:
            slow += _compare([(line, doc)], report, scope)
        elif i < len(held):
            slow.append(line)  # gone since its duplicate insert: through remember
        else:  # past the quota and not stored: nothing written
            report.bad.append(
                (line.number, f"quota_exceeded: the scope holds {store.settings.max_per_scope} memories")
            )
    return slow


async def _through_remember(
    store: LongTermMemory, scope: MemoryScope, lines: list[Line], author: str | None, report: ImportReport
) -> None:
    """Each line by `remember` itself, in file order: its rules of versions and history."""
    for line in lines:
        try:
            r = await store.remember(
                scope,
                line.text,
                namespace=line.namespace,
                key=line.key,
                metadata=line.metadata,
                ttl_days=line.ttl_days,
                author=author,
                source=line.extras.told[rd.SOURCE],
                occurred_at=line.extras.told[rd.OCCURRED_AT],
            )
            await portable.set_links(store, scope, r.id, line.extras.links(scope))
        except InvalidInput as e:
            report.bad.append((line.number, str(e)))
            continue
        except QuotaExceeded as e:
            report.bad.append((line.number, f"quota_exceeded: {e}"))
            continue
        setattr(report, r.status, getattr(report, r.status) + 1)


_FIELDS = {**IDENTITY_FIELDS, "metadata": 1, rd.EXPIRES_AT: 1, **portable.STORED}


def _ident(doc: Doc) -> Doc:
    """The identity (`store.identity`) of a new memory's document."""
    return {f: doc[f] for f in (rd.TENANT, rd.OWNER, "namespace", "keyed")} | (
        {"key": doc["key"]} if doc["keyed"] else {rd.TEXT_HASH: doc[rd.TEXT_HASH]}
    )


def _compare(pairs: list[tuple[Line, Doc]], report: ImportReport, scope: MemoryScope) -> list[Line]:
    """Lines whose memory is stored: counted `unchanged`, or returned for remember."""
    slow = []
    for line, held in pairs:
        if (
            held[rd.TEXT_HASH] == text_hash(line.text)
            and dict(held.get("metadata") or {}) == line.metadata
            and held.get(rd.EXPIRES_AT) is None
            and line.ttl_days is None
            and line.extras.same_told(held)
            and line.extras.linked(held, scope)
        ):
            report.unchanged += 1
        else:
            slow.append(line)
    return slow


async def _documents(
    store: LongTermMemory, pairs: list[tuple[Line, Doc]], now: Any, author: str | None, scope: MemoryScope
) -> list[tuple[Line, Doc]]:
    """Each line's version 1, its text embedded in one call for the batch."""
    if not pairs:
        return []
    vectors = await store.embedder.embed([line.text for line, _ in pairs])
    if len(vectors) != len(pairs) or any(len(v) != store.embedder.dimensions for v in vectors):
        raise StorageError(f"the embedding model {store.embedder.model!r} answered with the wrong shape")
    out = []
    for (line, ident), vector in zip(pairs, vectors, strict=True):
        expires = None if line.ttl_days is None else now + timedelta(days=line.ttl_days)
        told = line.extras.told | line.extras.links(scope)
        doc = store.new_document(ident, line.text, line.metadata, vector, now, expires, author, told)
        out.append((line, doc))
    return out


async def _insert(
    store: LongTermMemory, scope: MemoryScope, fresh: list[tuple[Line, Doc]], now: Any, report: ImportReport
) -> tuple[list[tuple[Line, Doc]], list[tuple[Line, Doc]]]:
    """Insert the new memories in one call, within the scope's quota: the (line, document) of each
    insert that was a duplicate `_id` (the memory is there), and of each line past the quota (not
    inserted: stored already, or refused)."""
    if not fresh:
        return [], []
    limit = store.settings.max_per_scope
    try:
        room, _ = await quota.reserve(store.revisions, store.memories, scope, len(fresh), limit, now)
    except PyMongoError as e:
        raise StorageError("could not store the imported memories") from e
    over = fresh[room:]
    fresh = fresh[:room]
    if not fresh:
        return [], over
    try:
        async with store.writing(scope, ends_on=(MongogateError, PyMongoError)):  # bumped in `finally`
            try:
                await store.memories.insert_many([doc for _, doc in fresh], ordered=False)
                store.at("import.after_insert")
            finally:  # whatever landed is named to every process's index (recall/coherence.py)
                await store.changed(scope, *(str(doc["_id"]) for _, doc in fresh), alive=None)
    except BulkWriteError as e:
        lost = {int(err["index"]) for err in e.details.get("writeErrors", []) if err.get("code") == 11000}
        other = [err for err in e.details.get("writeErrors", []) if err.get("code") != 11000]
        if other:
            raise StorageError("could not store the imported memories") from e
        await quota.release(store.revisions, scope, len(lost))  # those were not created here
        report.created += len(fresh) - len(lost)
        return [fresh[i] for i in sorted(lost)], over
    except PyMongoError as e:
        raise StorageError("could not store the imported memories") from e
    report.created += len(fresh)
    return [], over


async def export_lines(
    store: LongTermMemory, scope: MemoryScope, *, namespace: object = None, batch: int = BATCH
) -> AsyncIterator[str]:
    """The scope's live memories as import lines, oldest first (so an import keeps their order)."""
    now = store.clock.now()
    fields = {"text": 1, "namespace": 1, "key": 1, "metadata": 1, rd.EXPIRES_AT: 1, **portable.STORED}
    try:
        cursor = store.memories.find(
            store.scoped(scope, namespace, now),
            fields,
            sort=[(rd.UPDATED_AT, ASCENDING), ("_id", ASCENDING)],
            batch_size=batch,
        )
        async for doc in cursor:
            row: Doc = {"text": doc["text"], "namespace": doc["namespace"]}
            if doc.get("key") is not None:
                row["key"] = doc["key"]
            if doc.get("metadata"):
                row["metadata"] = doc["metadata"]
            expires = doc.get(rd.EXPIRES_AT)
            if expires is not None:
                left = (as_utc(expires) - now) / timedelta(days=1)
                row["ttl_days"] = min(max(math.ceil(left), 1), store.settings.max_ttl_days)
            row |= await portable.exported(store, scope, doc)
            yield json.dumps(row, ensure_ascii=False, separators=(",", ":"))
    except PyMongoError as e:
        raise StorageError("could not read the memories to export") from e
