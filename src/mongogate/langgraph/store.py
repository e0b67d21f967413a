"""`MongogateStore`: LangGraph's `BaseStore` over mongogate's long-term memory (`recall/`).

A LangGraph namespace ``("users", "u1")`` is the memory namespace ``users/u1``, one segment per
label: a label's characters outside the namespace's own (letters, digits, ``_ . : @ + -``) are
written ``+XX`` per UTF-8 byte (and a ``+`` followed by two upper-case hex digits as ``+2B``), so
the label ``"a/b"`` is the one segment ``a+2Fb`` and reads back as ``("a/b",)``, never as
``("a", "b")`` (it did: the two namespaces were one). A label stored before (it could hold only
the namespace's characters) keys and reads as it did, unless it holds ``+`` and two upper-case
hex digits. An item is one keyed memory: its
value (a JSON object) is the memory's metadata, its text the value's ``"text"`` when that is a
string, else the value as JSON (what recall embeds and matches).
`search` with a query ranks by meaning (`recall`, the same ranking as the MCP `recall` tool);
without one it lists newest first. `filter` matches top-level values exactly. Every read and
write is scoped to the tenant the store was opened with; the MCP tools of that tenant see
the same memories.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from pymongo import DESCENDING
from pymongo.errors import PyMongoError

from mongogate.assembly import long_term_memory
from mongogate.bridge import Bridge, check_tenant, settings_for
from mongogate.clock import as_utc
from mongogate.config import Settings
from mongogate.errors import InvalidInput, StorageError
from mongogate.recall import (
    MemoryScope,
    check_metadata_filter,
    check_namespace,
    identity,
)
from mongogate.values import Doc

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


def text_of(value: Mapping[str, Any]) -> str:
    text = value.get("text")
    return text if isinstance(text, str) and text else json.dumps(value, sort_keys=True, default=str)


class MongogateStore(BaseStore):
    """LangGraph long-term memory on mongogate. Open with `MongogateStore.open(...)`."""

    def __init__(self, bridge: Bridge, tenant: str) -> None:
        self._bridge = bridge
        self.scope = MemoryScope(tenant)
        self._memory = long_term_memory(bridge.settings, bridge.db.memory)

    @classmethod
    @contextlib.contextmanager
    def open(
        cls, config: str | Path | Settings | None = None, *, tenant: str | None = None
    ) -> Iterator[MongogateStore]:
        settings = settings_for(config)
        who = check_tenant(tenant, settings)
        bridge = Bridge(settings)
        bridge.open()
        try:
            store = cls(bridge, who)
            bridge.call(store._memory.ensure_indexes())
            yield store
        finally:
            bridge.close()

    # ------------------------------------------------------------------ BaseStore

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._bridge.call(self._batch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._bridge.acall(self._batch(list(ops)))

    async def _batch(self, ops: list[Op]) -> list[Result]:
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

    # ------------------------------------------------------------------ operations

    def _live(self, namespace: str | None) -> Doc:
        return self._memory.scoped(self.scope, namespace, self._memory.clock.now())

    async def _get(self, op: GetOp) -> Item | None:
        ident = identity(self.scope, namespace_of(op.namespace), op.key, "")
        try:  # by the memory's derived _id (recall/ids.py), checked against the scope
            doc = await self._memory.lookup(self.scope, ident, {"embedding": 0})
        except PyMongoError as e:
            raise StorageError("could not read the memory") from e
        exp = None if doc is None else doc.get("expires_at")
        if doc is None or (exp is not None and as_utc(exp) <= self._memory.clock.now()):
            return None
        return _item(doc)

    async def _put(self, op: PutOp) -> None:
        ns = namespace_of(op.namespace)
        if op.value is None:
            await self._memory.forget(self.scope, namespace=ns, key=op.key)
            return
        ttl_days = None if op.ttl is None else max(1, round(op.ttl / (24 * 60)))  # minutes -> days
        await self._memory.remember(
            self.scope,
            text_of(op.value),
            namespace=ns,
            key=op.key,
            metadata=dict(op.value),
            ttl_days=ttl_days,
        )

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        ns = namespace_of(op.namespace_prefix) if op.namespace_prefix else None
        limit, offset = max(0, op.limit), max(0, op.offset)
        if limit == 0:
            return []
        if op.query:
            # LangGraph's search ranks and never filters by relevance: no min_score floor
            found = await self._memory.recall(
                self.scope,
                op.query,
                namespace=ns,
                limit=limit + offset,
                metadata=op.filter or None,
                min_score=0,
            )
            return [
                _search_item(m.namespace, m.key or m.id, m.metadata, m.created_at, m.updated_at, m.score)
                for m in found.memories[offset:]
            ]
        filt = check_metadata_filter(op.filter, self._memory.limits)
        query = self._live(ns) | {f"metadata.{k}": v for k, v in filt.items()}
        try:
            docs = await self._memory.memories.find(
                query,
                {"embedding": 0},
                sort=[("updated_at", DESCENDING), ("_id", DESCENDING)],
                skip=offset,
                limit=min(limit, MAX_PAGE),
            ).to_list()
        except PyMongoError as e:
            raise StorageError("could not search the memories") from e
        return [
            _search_item(
                d["namespace"],
                d.get("key") or str(d["_id"]),
                d.get("metadata") or {},
                d["created_at"],
                d["updated_at"],
                None,
            )
            for d in docs
        ]

    async def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
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
        return ordered[op.offset : op.offset + min(op.limit, MAX_PAGE)]


def _matches(parts: tuple[str, ...], cond: MatchCondition) -> bool:
    path = tuple(cond.path)
    if len(path) > len(parts):
        return False
    window = parts[: len(path)] if cond.match_type == "prefix" else parts[len(parts) - len(path) :]
    return all(p == "*" or p == w for p, w in zip(path, window, strict=True))


def _item(doc: Doc) -> Item:
    return Item(
        value=dict(doc.get("metadata") or {}),
        key=str(doc.get("key") or doc["_id"]),
        namespace=labels_of(str(doc["namespace"])),
        created_at=as_utc(doc["created_at"]),
        updated_at=as_utc(doc["updated_at"]),
    )


def _search_item(
    namespace: str,
    key: str,
    value: Mapping[str, Any],
    created: datetime,
    updated: datetime,
    score: float | None,
) -> SearchItem:
    return SearchItem(
        namespace=labels_of(namespace),
        key=key,
        value=dict(value),
        created_at=as_utc(created),
        updated_at=as_utc(updated),
        score=score,
    )
