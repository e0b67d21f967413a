"""Each start creates only the indexes a collection does not already hold.

A server checks its collections' indexes at every start, before it reports ready (`/readyz`) or
serves a call. `create_index` of an index that is already there is a no-op, but still a command
the engine takes its time over: thirteen of them were about half of what a warm HTTP start spent
on the database (benchmarks/RESULTS.md, start-up, issue 38). So the indexes of a collection are
declared together and `ensure_indexes` reads the collection's list once (`listIndexes`) and
sends one `createIndexes` for those missing, or for one held under the same name with another key
or other options (the server then refuses or accepts it exactly as before). What is missing is
still created before the caller goes on: the start waits for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pymongo import IndexModel
from pymongo.asynchronous.collection import AsyncCollection

from mongogate.values import Doc

__all__ = ["IndexModel", "ensure_indexes", "held_indexes"]


async def held_indexes(coll: AsyncCollection[Doc]) -> dict[str, Doc]:
    """The indexes ``coll`` holds, by name (one `listIndexes`; none for a missing collection)."""
    return {str(ix["name"]): dict(ix) async for ix in await coll.list_indexes()}


def _key(held: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """A held index's key as it was declared: MongoDB lists a text index by its internal key
    (`_fts`, `_ftsx`) and its fields as `weights`; the embedded engine as declared."""
    key = list(dict(held["key"]).items())
    if key == [("_fts", "text"), ("_ftsx", 1)]:
        return [(str(field), "text") for field in dict(held.get("weights") or {})]
    return key


#: what a server lists of its own beside the options declared (never a difference): the index
#: version, namespace, build mode, and a text index's weights and language settings
_SERVER_ADDED = frozenset(
    {"v", "ns", "background", "weights", "language_override", "textIndexVersion", "default_language"}
)


def _same(held: Mapping[str, Any] | None, declared: Mapping[str, Any]) -> bool:
    """Whether ``held`` is the index ``declared`` describes: the same key, in order, the same
    value of every option declared, and no option held that is not declared (a unique, TTL or
    partial index under the declared name is another index: sent, the server refuses it as it did
    before), but those the server adds of its own (`_SERVER_ADDED`, and a false `unique`,
    `sparse` or `hidden`)."""
    if held is None or _key(held) != list(dict(declared["key"]).items()):
        return False
    if any(held.get(k) != v for k, v in declared.items() if k not in ("key", "name")):
        return False
    extra = {k: v for k, v in held.items() if k not in declared and k not in ("key", "name")}
    falsy_ok = ("unique", "sparse", "hidden")
    return all(k in _SERVER_ADDED or (k in falsy_ok and not v) for k, v in extra.items())


async def ensure_indexes(
    coll: AsyncCollection[Doc], wanted: Sequence[IndexModel], held: Mapping[str, Doc] | None = None
) -> list[str]:
    """Create those of ``wanted`` that ``coll`` does not hold (``held``: its indexes, if the
    caller read them already); the names created, or sent again. No `createIndexes` when all are
    there. Every ``wanted`` model must be named."""
    have = await held_indexes(coll) if held is None else held
    missing = [m for m in wanted if not _same(have.get(m.document["name"]), m.document)]
    if missing:
        await coll.create_indexes(missing)
    return [m.document["name"] for m in missing]
