"""Supersession's reads and writes on the database (the rule is `recall/chain.py`):

- `resolve`: what a remember's `supersedes` names, read and checked before anything is written
  (each a live memory of the caller's scope, by id or by key of the new memory's namespace; not
  the new memory itself; room for one more link on it);
- `link`: the two halves of each link, written in the remember's `writing` block (the newer
  memory's `supersedes.<id>` first, then the older one's `superseded_by.<id>`), each a `$set` of
  one map entry by `_id` (flat on the embedded engine, and two calls linking the same memory
  never lose each other's entry), then one revision bump naming every memory written;
- `replacers`: for documents read from the database (list_memories, memory_history, a memory
  resource, the search index's ranker), the links that hold: each older document names its newer
  ones (`superseded_by`), read by `_id` and checked against the rule (the in-process index holds
  both halves itself: `inprocess/chains.py`);
- `noticed`: a remember's notice of older memories very close in meaning, from the scope's index
  if this server process holds it (never read for it: a remember costs no scan).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from datetime import datetime

from mongogate.clock import utc_or_none
from mongogate.errors import InvalidInput, NotFound
from mongogate.leases import literal
from mongogate.recall import checks
from mongogate.recall import documents as rd
from mongogate.recall.chain import MAX_LINKS, SIMILAR_MAX, holds
from mongogate.recall.coherence import read_by_id
from mongogate.recall.ids import IDENTITY_FIELDS, in_scope, memory_id
from mongogate.recall.model import Link, MemoryItem, MemoryScope, Remembered, links_of
from mongogate.recall.repository import RecallRepository
from mongogate.values import Doc, shown

#: what `resolve` reads of a memory named in `supersedes`
_TARGET = {**IDENTITY_FIELDS, rd.EXPIRES_AT: 1, rd.SUPERSEDED_BY: 1, rd.STATED_AT: 1}
#: what `replacers` reads of a newer memory
_NEWER = {rd.TENANT: 1, rd.OWNER: 1, rd.EXPIRES_AT: 1, rd.CREATED_AT: 1, rd.SUPERSEDES: 1}
#: a memory id as mongogate makes them (32 hex) or as an earlier version did (a uuid)
_ID_SHAPE = re.compile(r"[0-9a-f]{32}|[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")


def _live(doc: Doc | None, scope: MemoryScope, now: datetime) -> bool:
    if not in_scope(doc, scope) or doc is None:
        return False
    expires = utc_or_none(doc.get(rd.EXPIRES_AT))
    return expires is None or expires > now


def _same_memory(doc: Doc, ident: Doc) -> bool:
    """`doc` is the memory `ident` (`store.identity`) names, whatever its `_id` (a uuid of an
    earlier version included)."""
    if doc.get("namespace") != ident["namespace"] or bool(doc.get("keyed")) != bool(ident["keyed"]):
        return False
    field = "key" if ident["keyed"] else rd.TEXT_HASH
    return bool(doc.get(field) == ident[field])


async def _named(store: RecallRepository, scope: MemoryScope, namespace: str, ref: str) -> Doc | None:
    """The memory `ref` names: by id when it has an id's shape, else (or when no memory has that
    id) by key in `namespace`."""
    if _ID_SHAPE.fullmatch(ref):
        doc = await store.memories.find_one({"_id": ref}, _TARGET)
        if in_scope(doc, scope):
            return doc
    if len(ref) > checks.MAX_KEY_CHARS:
        return None
    ident = {**scope.match(), "namespace": namespace, "keyed": True, "key": ref}
    doc = await store.memories.find_one({"_id": memory_id(ident)}, _TARGET)
    if doc is None and store.legacy:  # a memory stored by an earlier version, under a uuid
        doc = await store.memories.find_one(ident, _TARGET)
    return doc if in_scope(doc, scope) else None


async def resolve(
    store: RecallRepository, scope: MemoryScope, ident: Doc, refs: tuple[str, ...]
) -> list[Doc]:
    """The memories `refs` name, each once, checked; NotFound (the same words for another scope's
    memory as for none) or InvalidInput before anything is written."""
    now = store.clock.now()
    found: dict[str, Doc] = {}
    for ref in refs:
        doc = await _named(store, scope, str(ident["namespace"]), ref)
        if doc is None or not _live(doc, scope, now):
            raise NotFound(
                f"supersedes: no memory {shown(ref)} (an id, or a key of namespace {ident['namespace']!r}); "
                "it was forgotten, expired, or never existed. Nothing was stored"
            )
        if _same_memory(doc, ident):
            raise InvalidInput(
                f"supersedes: {shown(ref)} is the memory being remembered; a new text under the same key "
                "already replaces its old text (memory_history keeps it). Nothing was stored"
            )
        held = doc.get(rd.SUPERSEDED_BY) or {}
        if len(held) >= MAX_LINKS and memory_id(ident) not in held:
            raise InvalidInput(
                f"supersedes: memory {shown(ref)} is already replaced by {MAX_LINKS} memories, the most "
                "one memory keeps; forget some of them first. Nothing was stored"
            )
        found.setdefault(str(doc["_id"]), doc)
    return list(found.values())


def room_for(targets: list[Doc]) -> Callable[[Doc], None]:
    """The check a remember runs on the memory it read (before writing): room for the new links."""

    def check(found: Doc) -> None:
        held = set(found.get(rd.SUPERSEDES) or {})
        if len(held | {str(t["_id"]) for t in targets}) > MAX_LINKS:
            raise InvalidInput(
                f"supersedes: this memory already replaces {len(held)} memories; it may replace at most "
                f"{MAX_LINKS}. Nothing was stored"
            )

    return check


async def link(store: RecallRepository, scope: MemoryScope, mid: str, targets: list[Doc]) -> tuple[Link, ...]:
    """The links from memory `mid` (written just now, in the caller's `writing` block) to each
    target: a link already holding keeps its time (a retry changes nothing), a new one or one the
    target has since been stated current over is stated now; `mid` is stated current now."""
    now = store.clock.now()
    newer = await store.memories.find_one({"_id": mid}, {rd.SUPERSEDES: 1})
    held = {k.id: k.at for k in links_of((newer or {}).get(rd.SUPERSEDES))}
    fresh: Doc = {}  # new links: a concurrent call's entry, written first, wins
    restated: Doc = {}  # links the target was stated current over since: stated again, now
    for t in targets:
        tid = str(t["_id"])
        at = held.get(tid)
        if at is None:
            fresh[tid] = literal(now)
        elif not holds(at, utc_or_none(t.get(rd.STATED_AT))):
            restated[tid] = literal(now)
    merged = {"$mergeObjects": [fresh, {"$ifNull": [f"${rd.SUPERSEDES}", {}]}, restated]}
    await store.memories.update_one(
        {"_id": mid}, [{"$set": {rd.SUPERSEDES: merged, rd.STATED_AT: literal(now)}}]
    )
    store.at("remember.after_link")
    # the times as stored: two calls writing the same link at once (a retry racing its first
    # attempt) both answer, and write the second half with, the one that won
    stored = await store.memories.find_one({"_id": mid}, {rd.SUPERSEDES: 1})
    kept = {k.id: k.at for k in links_of((stored or {}).get(rd.SUPERSEDES))}
    links = [Link(str(t["_id"]), kept.get(str(t["_id"]), now)) for t in targets]
    written = [mid]
    for t, k in zip(targets, links, strict=True):
        if utc_or_none((t.get(rd.SUPERSEDED_BY) or {}).get(mid)) != k.at:
            await store.memories.update_one({"_id": k.id}, {"$set": {f"{rd.SUPERSEDED_BY}.{mid}": k.at}})
            written.append(k.id)
    await store.changed(scope, *written)
    return tuple(sorted(links, key=lambda k: (k.at, k.id)))  # as every reader orders them


async def replacers(
    store: RecallRepository, scope: MemoryScope, docs: list[Doc], as_of: datetime | None = None
) -> dict[str, tuple[Link, ...]]:
    """Id -> the links that replace it, for each of `docs` that is replaced (now, or as of
    `as_of`): its `superseded_by` ids read by `_id` and checked (`chain.holds`). `docs` must hold
    `_id`, `superseded_by` and `stated_at`."""
    wanted = sorted({str(n) for d in docs for n in (d.get(rd.SUPERSEDED_BY) or {})})
    if not wanted:
        return {}
    newer = await read_by_id(store.memories, wanted, _NEWER)
    now = store.clock.now()
    out: dict[str, tuple[Link, ...]] = {}
    for d in docs:
        links = [
            k for n in d.get(rd.SUPERSEDED_BY) or {} if (k := _link(d, newer.get(str(n)), scope, now, as_of))
        ]
        if links:
            out[str(d["_id"])] = tuple(sorted(links, key=lambda k: (k.at, k.id)))
    return out


def _link(
    older: Doc, newer: Doc | None, scope: MemoryScope, now: datetime, as_of: datetime | None
) -> Link | None:
    """The link from `newer` (read by `_id`) that replaces `older`, when it holds (`chain.holds`):
    its half present, live in the scope, another memory, created by `as_of`."""
    mid = str(older["_id"])
    at = None if newer is None else utc_or_none((newer.get(rd.SUPERSEDES) or {}).get(mid))
    if newer is None or at is None or str(newer["_id"]) == mid or not _live(newer, scope, now):
        return None
    created = utc_or_none(newer.get(rd.CREATED_AT))
    if as_of is not None and (created is None or created > as_of):
        return None
    return Link(str(newer["_id"]), at) if holds(at, utc_or_none(older.get(rd.STATED_AT)), as_of) else None


async def marked(store: RecallRepository, scope: MemoryScope, docs: list[Doc]) -> list[MemoryItem]:
    """`docs` as items, each replaced one with the links that replace it (now)."""
    chained = await replacers(store, scope, docs)
    items = [MemoryItem.from_doc(d) for d in docs]
    return [dataclasses.replace(m, superseded_by=chained[m.id]) if m.id in chained else m for m in items]


def noticed(
    store: RecallRepository, scope: MemoryScope, r: Remembered, vector: list[float], targets: list[Doc]
) -> Remembered:
    """`r` with the older memories of the scope very close in meaning to the new text (not the ones
    it replaces), from the scope's index if this server process holds it, as of its last refresh
    (None: not held; nothing is read to build it). An `unchanged` remember stored no new fact."""
    if r.status == "unchanged":
        return r
    idx = store.index.held(scope, store.embedder.model, store.embedder.dimensions)
    if idx is None:
        return r
    from mongogate.recall.inprocess import chains  # loaded with the index held

    found = chains.similar_to(
        idx,
        vector,
        now=store.clock.now(),
        exclude={r.id, *(str(t["_id"]) for t in targets)},
        min_score=store.settings.similar_min_score,
        limit=SIMILAR_MAX,
    )
    return dataclasses.replace(r, similar=tuple(found))
