"""What an export line carries beyond the text (`recall/bulk.py`): the version's `source` and
`occurred_at`, and the memory's chain (`recall/chain.py`) in a form another scope can take.

A memory id is derived from its scope (`recall/ids.py`), so an export names the memories of a
link by identity, not by id: `{"namespace", "key"}` for a keyed memory, `{"namespace",
"text_sha256"}` for one without a key, with `at`, when the link was stated. A line carries both
halves that touch its memory: `supersedes` (the memories it replaces) and `superseded_by` (the
memories that replace it), and `stated_at`; an import writes each line's own halves on its own
document, so a link holds again once both of its lines are imported, in whichever order. A half
whose other memory is not in the scope (forgotten since) is not exported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from mongogate.clock import utc_or_none
from mongogate.errors import InvalidInput
from mongogate.recall import checks
from mongogate.recall import documents as rd
from mongogate.recall.chain import MAX_LINKS
from mongogate.recall.coherence import read_by_id
from mongogate.recall.ids import IDENTITY_FIELDS, in_scope, memory_id
from mongogate.recall.model import MemoryScope, links_of
from mongogate.recall.repository import RecallRepository
from mongogate.values import Doc

#: the fields of a line this module reads and writes
FIELDS = frozenset({"occurred_at", "source", "supersedes", "superseded_by", "stated_at"})
#: a stored memory's chain and what its version was told, as a line shows them
STORED = {rd.SOURCE: 1, rd.OCCURRED_AT: 1, rd.SUPERSEDES: 1, rd.SUPERSEDED_BY: 1, rd.STATED_AT: 1}
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Ref:
    """A memory named by identity, and when its link was stated."""

    namespace: str
    key: str | None
    text_sha256: str | None
    at: datetime

    def id_in(self, scope: MemoryScope) -> str:
        ident: Doc = {**scope.match(), "namespace": self.namespace}
        ident |= {"keyed": True, "key": self.key} if self.key is not None else {"keyed": False}
        return memory_id(ident | ({} if self.key is not None else {rd.TEXT_HASH: self.text_sha256}))


@dataclass(frozen=True)
class Extras:
    """A line's source, occurred_at, links and stated_at, checked."""

    told: Doc
    supersedes: tuple[Ref, ...] = ()
    superseded_by: tuple[Ref, ...] = ()
    stated_at: datetime | None = None

    def links(self, scope: MemoryScope) -> Doc:
        """The link fields as the memory of this line stores them in `scope`."""
        out: Doc = {}
        for name, refs in ((rd.SUPERSEDES, self.supersedes), (rd.SUPERSEDED_BY, self.superseded_by)):
            if refs:
                out[name] = {r.id_in(scope): r.at for r in refs}
        if self.stated_at is not None:
            out[rd.STATED_AT] = self.stated_at
        return out

    def same_told(self, held: Doc) -> bool:
        """The stored memory `held` already holds this line's source and occurred_at."""
        occurred = utc_or_none(held.get(rd.OCCURRED_AT))
        return bool(held.get(rd.SOURCE) == self.told[rd.SOURCE] and occurred == self.told[rd.OCCURRED_AT])

    def linked(self, held: Doc, scope: MemoryScope) -> bool:
        """The stored memory `held` already holds this line's links and stated_at."""
        for name, value in self.links(scope).items():
            if not isinstance(value, dict):
                if utc_or_none(held.get(name)) != value:
                    return False
                continue
            if any(utc_or_none((held.get(name) or {}).get(k)) != v for k, v in value.items()):
                return False
        return True


def _ref(value: object, what: str) -> Ref:
    if not isinstance(value, Mapping) or not {"namespace", "at"} <= set(value) or len(value) != 3:
        raise InvalidInput(f"{what} must be {{namespace, key or text_sha256, at}}")
    ns = checks.check_namespace(value["namespace"], f"{what}.namespace")
    at = checks.check_time(value["at"], f"{what}.at")
    if at is None:
        raise InvalidInput(f"{what}.at must be a time as {checks.TIME_FORMS}")
    if "key" in value:
        return Ref(ns, checks.check_key(value["key"]), None, at)
    digest = value.get("text_sha256")
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise InvalidInput(f"{what}.text_sha256 must be 64 lowercase hex characters")
    return Ref(ns, None, digest, at)


def _refs(value: object, what: str) -> tuple[Ref, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_LINKS:
        raise InvalidInput(f"{what} must be a list of at most {MAX_LINKS} memories")
    return tuple(_ref(v, f"{what}[{i}]") for i, v in enumerate(value))


def parse(value: Mapping[str, object]) -> Extras:
    """A line's extras, checked like remember's arguments (InvalidInput names the field)."""
    return Extras(
        checks.check_told(value.get("source"), value.get("occurred_at")),
        _refs(value.get("supersedes"), "supersedes"),
        _refs(value.get("superseded_by"), "superseded_by"),
        checks.check_time(value.get("stated_at"), "stated_at"),
    )


async def set_links(store: RecallRepository, scope: MemoryScope, mid: str, links: Doc) -> None:
    """A line's links set on its stored memory `mid` (each half one map entry, by `_id`), fenced
    like every write."""
    sets: Doc = {}
    for name, value in links.items():
        if isinstance(value, dict):
            sets |= {f"{name}.{k}": v for k, v in value.items()}
        else:
            sets[name] = value
    if sets:
        async with store.writing(scope):
            await store.memories.update_one({"_id": mid}, {"$set": sets})
            await store.changed(scope, mid)


async def exported(store: RecallRepository, scope: MemoryScope, doc: Doc) -> Doc:
    """The extras of an export line for stored memory `doc` (read with `STORED`): each half whose
    other memory is in the scope, by identity (one read by `_id` each)."""
    row: Doc = {}
    occurred = utc_or_none(doc.get(rd.OCCURRED_AT))
    if occurred is not None:
        row["occurred_at"] = occurred.isoformat()
    source = doc.get(rd.SOURCE)
    if isinstance(source, Mapping):
        row["source"] = {"session_id": source.get("session_id"), "seq": source.get("seq")}
    for name in (rd.SUPERSEDES, rd.SUPERSEDED_BY):
        links = links_of(doc.get(name))
        others = await read_by_id(store.memories, [k.id for k in links], IDENTITY_FIELDS)
        refs = [_ref_json(others[k.id], k.at.isoformat()) for k in links if in_scope(others.get(k.id), scope)]
        if refs:
            row[name] = refs
    stated = utc_or_none(doc.get(rd.STATED_AT))
    if stated is not None:
        row["stated_at"] = stated.isoformat()
    return row


def _ref_json(doc: Doc, at: str) -> Doc:
    if doc.get("keyed"):
        return {"namespace": doc["namespace"], "key": doc["key"], "at": at}
    return {"namespace": doc["namespace"], "text_sha256": doc[rd.TEXT_HASH], "at": at}
