"""The receipt of an erasure: what was removed or redacted in each collection, when, and a
digest of the ids, so an auditor holding a list of ids (a backup's) can check the claim.

The digest of a collection is order-free and adds up over batches and runs: each id removed
contributes `sha256(b"mongogate.erase/1\\0" + collection + b"\\0" + BSON({"_id": id}))` read as a
256-bit number, summed modulo 2**256 (64 hex digits). A run killed half way and resumed gives the
same digest as one uninterrupted run. The receipt's own digest is the SHA-256 of one line
`<action> <collection> <count> <digest>\\n` per collection, sorted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import bson

from mongogate.clock import iso_z

TAG = b"mongogate.erase/1"
MOD = 1 << 256
ZERO = "0" * 64

Action = Literal["removed", "redacted", "untouched"]


def id_hash(collection: str, doc_id: object) -> int:
    raw = bson.encode({"_id": doc_id})
    h = hashlib.sha256(TAG + b"\x00" + collection.encode("utf-8") + b"\x00" + raw).digest()
    return int.from_bytes(h, "big")


def fold(digest: str, collection: str, ids: Iterable[object]) -> str:
    """`digest` (64 hex digits) with `ids` added."""
    total = int(digest, 16)
    for i in ids:
        total = (total + id_hash(collection, i)) % MOD
    return f"{total:064x}"


@dataclass(frozen=True)
class CollectionReceipt:
    """One collection's line: documents removed or redacted over every run of this erasure."""

    collection: str
    package: str
    action: Action
    count: int = 0
    #: of `count`, by the run that wrote this receipt (less when an earlier run was stopped)
    this_run: int = 0
    digest: str | None = None
    #: why the collection was left alone (`untouched`)
    why: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"collection": self.collection, "package": self.package, "action": self.action}
        if self.action == "untouched":
            out["why"] = self.why
        else:
            out |= {"count": self.count, "this_run": self.this_run, "digest": self.digest}
        return out


@dataclass(frozen=True)
class ErasureReceipt:
    """What `mongogate erase` prints and `mongogate.erase` returns."""

    erasure_id: str
    tenant: str
    subject: str | None
    #: when the first run of this erasure began, and when this one finished (the receipt's time)
    started_at: datetime
    finished_at: datetime
    #: runs it took (more than 1: an earlier run stopped half way and this one went on)
    runs: int
    collections: tuple[CollectionReceipt, ...]
    #: what the erasure cannot reach, and why (docs/security.md, "Erasure")
    notes: tuple[str, ...] = ()

    @property
    def resumed(self) -> bool:
        return self.runs > 1

    def total(self, action: Action = "removed") -> int:
        return sum(c.count for c in self.collections if c.action == action)

    def count(self, collection: str, action: Action = "removed") -> int:
        return sum(c.count for c in self.collections if c.collection == collection and c.action == action)

    @property
    def digest(self) -> str:
        lines = sorted(
            f"{c.action} {c.collection} {c.count} {c.digest}\n"
            for c in self.collections
            if c.digest is not None
        )
        return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()

    def as_json(self) -> dict[str, Any]:
        return {
            "erasure_id": self.erasure_id,
            "tenant": self.tenant,
            "subject": self.subject,
            "started_at": iso_z(self.started_at),
            "finished_at": iso_z(self.finished_at),
            "runs": self.runs,
            "resumed": self.resumed,
            "removed": self.total("removed"),
            "redacted": self.total("redacted"),
            "removed_this_run": sum(c.this_run for c in self.collections if c.action == "removed"),
            "collections": [c.as_json() for c in self.collections],
            "digest": self.digest,
            "notes": list(self.notes),
        }

    def lines(self) -> list[str]:
        who = f"tenant {self.tenant!r}" + ("" if self.subject is None else f", subject {self.subject!r}")
        runs = "1 run" if self.runs == 1 else f"{self.runs} runs: resumed after a stopped run"
        out = [
            f"erasure {self.erasure_id} of {who}",
            f"finished {iso_z(self.finished_at)} (started {iso_z(self.started_at)}, {runs})",
        ]
        width = max((len(c.collection) for c in self.collections), default=10)
        for c in self.collections:
            if c.action == "untouched":
                out.append(f"  {'untouched':<9} {c.collection:<{width}}  {c.why}")
                continue
            earlier = "" if c.this_run == c.count else f" ({c.this_run} by this run)"
            out.append(f"  {c.action:<9} {c.collection:<{width}} {c.count:>8}{earlier}")
        out.append(f"removed {self.total('removed')}, redacted {self.total('redacted')}")
        out.append(f"digest sha256:{self.digest}")
        out += [f"note: {n}" for n in self.notes]
        return out
