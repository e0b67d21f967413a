"""`MongogateStore`: LangGraph's `BaseStore` over mongogate's long-term memory (`recall/`).

A LangGraph namespace ``("users", "u1")`` is the memory namespace ``users/u1``, one segment per
label: a label's characters outside the namespace's own (letters, digits, ``_ . : @ + -``) are
written ``+XX`` per UTF-8 byte (and a ``+`` followed by two upper-case hex digits as ``+2B``), so
the label ``"a/b"`` is the one segment ``a+2Fb`` and reads back as ``("a/b",)``, never as
``("a", "b")`` (it did: the two namespaces were one). A label stored before (it could hold only
the namespace's characters) keys and reads as it did, unless it holds ``+`` and two upper-case
hex digits. An item is one keyed memory: its value the memory's metadata, its text what the
`IndexConfig` names (`langgraph/items.py`: values, texts, filters, TTL).

`search` with a query ranks by meaning (`recall`, the same ranking as the MCP `recall` tool), and
then, as `InMemoryStore` does, fills the page with the unindexed items; without one it lists
newest first. `filter` takes exact values and LangGraph's operators. TTL (`supports_ttl`): an
item's `ttl` minutes set its memory's expiry, a read refreshes it (`refresh_ttl`, or the
`TTLConfig`'s `refresh_on_read`), an expired item is never read, and `sweep_ttl` (or the sweeper
`start_ttl_sweeper` runs, every `sweep_interval_minutes` of the store's clock) erases the expired
memories. Every write goes through the long-term memory store (`assembly.long_term_memory`), so the
revision of each change keeps every server process's recall index coherent. Every read and write
is scoped to the tenant the store was opened with; the MCP tools of that tenant see the same
memories.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import re
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)
from pymongo import DESCENDING
from pymongo.errors import PyMongoError

from mongogate.assembly import long_term_memory
from mongogate.bridge import Bridge, check_tenant, settings_for
from mongogate.clock import SYSTEM_CLOCK, Clock, as_utc
from mongogate.config import Settings
from mongogate.errors import InvalidInput, StorageError
from mongogate.langgraph import items as li
from mongogate.langgraph.sweeper import Sweeper
from mongogate.recall import (
    Compared,
    MemoryItem,
    MemoryScope,
    RecallFilter,
    check_namespace,
    expired_ids,
    identity,
    set_expiries,
)
from mongogate.values import JSON_ESCAPE_FACTOR, RESPONSE_ENVELOPE, Doc

#: most items one search without a query, or one namespace listing, reads
MAX_PAGE = 500


#: the characters a label keeps as they are (a namespace segment's)
_PLAIN = re.compile(r"[\w.:@+-]")
_HEX2 = re.compile(r"[0-9A-F]{2}")
_ESCAPED = re.compile(r"(?:\+[0-9A-F]{2})+")


def _escape(c: str) -> str:
    return "".join(f"+{b:02X}" for b in c.encode("utf-8", "surrogatepass"))


def encode_label(label: str) -> str:
    """One LangGraph label as one namespace segment: each character a segment cannot hold as
    '+XX' per UTF-8 byte, and a '+' as '+2B' only where two upper-case hex digits follow it
    (elsewhere it reads unambiguously as itself, as in every label stored before)."""
    return "".join(
        _escape(c) if not _PLAIN.fullmatch(c) or (c == "+" and _HEX2.match(label, i + 1)) else c
        for i, c in enumerate(label)
    )


def _decoded(found: re.Match[str]) -> str:
    raw = bytes.fromhex(found.group(0).replace("+", ""))
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:  # not ours (a label stored before, holding '+'): as it is
        return found.group(0)


def labels_of(namespace: str) -> tuple[str, ...]:
    """A stored namespace back as its LangGraph labels."""
    return tuple(_ESCAPED.sub(_decoded, segment) for segment in namespace.split("/"))


def namespace_of(namespace: tuple[str, ...]) -> str:
    """("users", "u1") -> "users/u1" (each label encoded, `encode_label`), checked by the
    long-term memory's namespace rules."""
    if not namespace:
        raise InvalidInput("a LangGraph namespace needs at least one label")
    return check_namespace("/".join(encode_label(label) for label in namespace))


class MongogateStore(BaseStore):
    """LangGraph long-term memory on mongogate. Open with `MongogateStore.open(...)`."""

    supports_ttl = True

    def __init__(
        self,
        bridge: Bridge,
        tenant: str,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._bridge = bridge
        self.scope = MemoryScope(tenant)
        self._memory = long_term_memory(whole_pages(bridge.settings), bridge.db.memory, clock=clock)
        self._limits = bridge.settings.limits
        self._settings = self._memory.settings
        self.index_config = index
        self._fields = li.check_index(index, self._memory.embedder.dimensions)
        self.ttl_config = li.check_ttl_config(ttl, self._settings)
        self._sweeper = Sweeper(bridge, clock, self._sweep)

    @classmethod
    @contextlib.contextmanager
    def open(
        cls,
        config: str | Path | Settings | None = None,
        *,
        tenant: str | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> Iterator[MongogateStore]:
        """The store of `tenant`; with `ttl`'s `sweep_interval_minutes`, its sweeper runs until it closes."""
        settings = settings_for(config)
        who = check_tenant(tenant, settings)
        bridge = Bridge(settings)
        bridge.open()
        store: MongogateStore | None = None
        try:
            store = cls(bridge, who, index=index, ttl=ttl, clock=clock)
            bridge.call(store._memory.ensure_indexes())
            if store.ttl_config and store.ttl_config.get("sweep_interval_minutes"):
                store.start_ttl_sweeper()
            yield store
        finally:
            if store is not None:
                store.stop_ttl_sweeper()
            bridge.close()

    # ------------------------------------------------------------------ BaseStore

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._bridge.call(self._batch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._bridge.acall(self._batch(list(ops)))

    async def _batch(self, ops: list[Op]) -> list[Result]:
        for op in ops:  # BaseStore's methods check labels; a direct batch() must be checked too
            validate_op_namespace(op)
        out: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                out.append(await self._get(op))
            elif isinstance(op, PutOp):
                await self._put(op)
                out.append(None)
            elif isinstance(op, SearchOp):
                out.append(await self._search(op))
            elif isinstance(op, ListNamespacesOp):
                out.append(await self._namespaces(op))
            else:  # pragma: no cover - langgraph defines no other op
                raise InvalidInput(f"unknown store operation {type(op).__name__}")
        return out

    # ------------------------------------------------------------------ TTL

    def sweep_ttl(self) -> int:
        """Erase the expired memories of the store's scope now; how many it erased."""
        return self._bridge.call(self._sweep())

    async def asweep_ttl(self) -> int:
        return await self._bridge.acall(self._sweep())

    def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None) -> concurrent.futures.Future[None]:
        """Sweep every `sweep_interval_minutes` (else the TTLConfig's, else 5) of the store's clock,
        until `stop_ttl_sweeper`, the store closes or the future is cancelled (`sweeper.py`)."""
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        return self._sweeper.start(float(minutes) * 60)

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; False when it had not stopped within `timeout` seconds."""
        return self._sweeper.stop(timeout)

    async def _sweep(self) -> int:
        n = 0
        for _ in range(self._settings.max_per_scope // SWEEP_BATCH + 1):  # bounded: the scope's quota
            ids = await expired_ids(self._memory, self.scope, self._memory.clock.now(), SWEEP_BATCH)
            for mid in ids:
                await self._memory.forget(self.scope, id=mid)
            n += len(ids)
            if len(ids) < SWEEP_BATCH:
                break
        return n

    async def _refresh(self, read: Iterable[tuple[str, int, dict[str, Any]]]) -> None:
        """Each memory read (id, version, metadata) that has a TTL expires its TTL from now."""
        now = self._memory.clock.now()
        moves = [
            (mid, version, now + timedelta(minutes=ttl))
            for mid, version, meta in read
            if (ttl := li.ttl_of(meta)) is not None
        ]
        await set_expiries(self._memory, self.scope, moves)

    # ------------------------------------------------------------------ operations

    def _live(self, namespace: str | None, metadata: Doc | None = None) -> Doc:
        return RecallFilter.of(self.scope, self._memory.clock.now(), namespace, metadata).mongo()

    async def _get(self, op: GetOp) -> Item | None:
        ident = identity(self.scope, namespace_of(op.namespace), op.key, "")
        try:  # by the memory's derived _id (recall/ids.py), checked against the scope
            doc = await self._memory.lookup(self.scope, ident, {"embedding": 0})
        except PyMongoError as e:
            raise StorageError("could not read the memory") from e
        exp = None if doc is None else doc.get("expires_at")
        if doc is None or (exp is not None and as_utc(exp) <= self._memory.clock.now()):
            return None
        if op.refresh_ttl:
            await self._refresh([_read(doc)])
        return _item(doc)

    async def _put(self, op: PutOp) -> None:
        ns = namespace_of(op.namespace)
        if op.value is None:
            await self._memory.forget(self.scope, namespace=ns, key=op.key)
            return
        where = f"value of {op.namespace}/{op.key!r}"
        value = li.check_value(op.value, self._limits, where)
        minutes = li.check_ttl(op.ttl, self._settings)
        text = li.indexed_text(value, self._fields, op.index)
        meta = dict(value)
        if text is None:
            meta[li.UNINDEXED] = True
        if minutes is not None:
            meta[li.TTL_KEY] = minutes
        done = await self._memory.remember(
            self.scope,
            li.cut((li.text_of(value) if text is None else text).strip(), self._settings.max_text_bytes),
            namespace=ns,
            key=op.key,
            metadata=meta,
            ttl_days=None if minutes is None else li.coarse_days(minutes, self._settings),
        )
        if minutes is not None:  # the exact expiry, on the version just written
            await self._refresh([(done.id, done.version, meta)])

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        ns = namespace_of(op.namespace_prefix) if op.namespace_prefix else None
        limit, offset = max(0, op.limit), max(0, op.offset)
        if limit > MAX_PAGE:
            raise InvalidInput(f"search limit={limit}: at most {MAX_PAGE} items a call; page with offset")
        if limit == 0:
            return []
        filt = li.memory_filter(op.filter, self._limits)
        found: list[Found] = []
        ranked = 0
        if op.query:
            found, ranked = await self._ranked(op.query, ns, filt, limit, offset)
        if not op.query or len(found) < limit:
            # after the ranked items, as InMemoryStore: the unindexed ones (every one, without a query)
            unindexed = {li.UNINDEXED: True} if op.query else {}
            found += await self._listed(ns, filt | unindexed, max(0, offset - ranked), limit - len(found))
        if op.refresh_ttl:
            await self._refresh((mid, version, meta) for _, mid, version, meta in found)
        return [item for item, *_ in found]

    async def _ranked(
        self, query: str, ns: str | None, filt: Doc, limit: int, offset: int
    ) -> tuple[list[Found], int]:
        """The indexed items by the recall ranking (LangGraph's search ranks and never filters by
        relevance: no `min_score` floor), from `offset`; and how many there were before it."""
        most = self._settings.max_recall_limit
        if limit + offset > most:
            raise InvalidInput(
                f"search with a query ranks at most {most} items (limit + offset = {limit + offset}; "
                "memory.long_term.max_recall_limit)"
            )
        indexed = {li.UNINDEXED: Compared((("$ne", True),))}
        got = await self._memory.recall(
            self.scope, query, namespace=ns, limit=limit + offset, metadata=filt | indexed, min_score=0
        )
        if got.truncated:  # pragma: no cover - `whole_pages` sizes the cap for the largest page
            raise StorageError("the ranked items did not fit in one reply; search with a smaller limit")
        ranked = [(_ranked_item(m), m.id, m.version, m.metadata) for m in got.memories[offset:]]
        return ranked, len(got.memories)

    async def _listed(self, ns: str | None, filt: Doc, skip: int, limit: int) -> list[Found]:
        try:
            docs = await self._memory.memories.find(
                self._live(ns, filt),
                {"embedding": 0},
                sort=[("updated_at", DESCENDING), ("_id", DESCENDING)],
                skip=skip,
                limit=limit,
            ).to_list()
        except PyMongoError as e:
            raise StorageError("could not search the memories") from e
        return [(_listed_item(d), *_read(d)) for d in docs]

    async def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        if op.limit > MAX_PAGE:
            raise InvalidInput(f"list_namespaces limit={op.limit}: at most {MAX_PAGE}; page with offset")
        try:
            names = await self._memory.memories.distinct("namespace", self._live(None))
        except PyMongoError as e:
            raise StorageError("could not list the namespaces") from e
        found: set[tuple[str, ...]] = set()
        for name in names:
            parts = labels_of(str(name))
            if all(_matches(parts, c) for c in op.match_conditions or ()):
                found.add(parts[: op.max_depth] if op.max_depth is not None else parts)
        ordered = sorted(found)
        return ordered[op.offset : op.offset + op.limit]


#: a search's item, with what a refresh needs of its memory (`_read`)
Found = tuple[SearchItem, str, int, dict[str, Any]]
#: expired memories one sweep round reads (a sweep takes rounds until none is left)
SWEEP_BATCH = 100


def whole_pages(settings: Settings) -> Settings:
    """The settings with a recall reply cap that holds the largest page a search ranks
    (`max_recall_limit` items of the largest text and metadata): the store returns Python
    objects, not an MCP reply, and must not leave ranked items out for size."""
    lt, limits = settings.memory.long_term, settings.limits
    item = JSON_ESCAPE_FACTOR * (lt.max_text_bytes + limits.metadata_max_chars + lt.max_query_chars)
    cap = max(lt.max_response_bytes, lt.max_recall_limit * (item + 1024) + RESPONSE_ENVELOPE)
    long_term = lt.model_copy(update={"max_response_bytes": cap})
    return settings.model_copy(update={"memory": settings.memory.model_copy(update={"long_term": long_term})})


def _read(doc: Doc) -> tuple[str, int, dict[str, Any]]:
    """What a refresh needs of a memory read: its id, its version, its metadata (the TTL)."""
    return str(doc["_id"]), int(doc["version"]), dict(doc.get("metadata") or {})


def _matches(parts: tuple[str, ...], cond: MatchCondition) -> bool:
    path = tuple(cond.path)
    if len(path) > len(parts):
        return False
    window = parts[: len(path)] if cond.match_type == "prefix" else parts[len(parts) - len(path) :]
    return all(p == "*" or p == w for p, w in zip(path, window, strict=True))


def _item(doc: Doc) -> Item:
    return Item(
        value=li.stored_value(doc.get("metadata") or {}),
        key=str(doc.get("key") or doc["_id"]),
        namespace=labels_of(str(doc["namespace"])),
        created_at=as_utc(doc["created_at"]),
        updated_at=as_utc(doc["updated_at"]),
    )


def _listed_item(doc: Doc) -> SearchItem:
    return _search_item(
        str(doc["namespace"]),
        str(doc.get("key") or doc["_id"]),
        doc.get("metadata") or {},
        doc["created_at"],
        doc["updated_at"],
        None,
    )


def _ranked_item(m: MemoryItem) -> SearchItem:
    return _search_item(m.namespace, m.key or m.id, m.metadata, m.created_at, m.updated_at, m.score)


def _search_item(
    namespace: str,
    key: str,
    value: dict[str, Any],
    created: datetime,
    updated: datetime,
    score: float | None,
) -> SearchItem:
    return SearchItem(
        namespace=labels_of(namespace),
        key=key,
        value=li.stored_value(value),
        created_at=as_utc(created),
        updated_at=as_utc(updated),
        score=score,
    )
