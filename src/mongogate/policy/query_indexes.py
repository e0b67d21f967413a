"""Every query rides an index: which declared indexes exist, and the command that creates one.

mongogate never creates an operator's index itself (the demo seeds its own): `mongogate check`
prints the command, and `serve` refuses to start while a declared index is missing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongogate.errors import StorageError
from mongogate.specs import QueryToolSpec


@dataclass(frozen=True)
class IndexStatus:
    spec: QueryToolSpec
    #: None when the spec declares no index
    present: bool | None

    @property
    def command(self) -> str:
        return create_index_command(self.spec)


def create_index_command(spec: QueryToolSpec) -> str:
    """The mongosh command that creates the spec's declared index."""
    keys = json.dumps(dict(spec.index or []))
    return f"db.getCollection({json.dumps(spec.collection)}).createIndex({keys})"


def _same(key: Any, wanted: list[tuple[str, int]]) -> bool:
    try:
        return [(str(k), int(d)) for k, d in key] == wanted
    except (TypeError, ValueError):  # text or hashed indexes: never the declared pattern
        return False


async def index_status(db: AsyncDatabase[Any], specs: Iterable[QueryToolSpec]) -> list[IndexStatus]:
    """One status per spec, in order; a collection that does not exist has no indexes."""
    out: list[IndexStatus] = []
    seen: dict[str, list[Any]] = {}
    for spec in specs:
        if spec.index is None:
            out.append(IndexStatus(spec, None))
            continue
        if spec.collection not in seen:
            try:
                info = await db[spec.collection].index_information()
            except PyMongoError as e:
                raise StorageError(f"could not list the indexes of {spec.collection!r}") from e
            # a partial or hidden index cannot serve every query as a hint: never the declared one
            seen[spec.collection] = [
                v.get("key", [])
                for v in info.values()
                if "partialFilterExpression" not in v and not v.get("hidden", False)
            ]
        wanted = [(k, int(d)) for k, d in spec.index]
        out.append(IndexStatus(spec, any(_same(key, wanted) for key in seen[spec.collection])))
    return out


def missing_report(statuses: Iterable[IndexStatus]) -> str | None:
    """What to run, or None when every declared index exists."""
    missing = [s for s in statuses if s.present is False]
    if not missing:
        return None
    lines = [
        f"query tool {s.spec.name!r}: index {s.spec.index} is missing; create it with\n  {s.command}"
        for s in missing
    ]
    return "\n".join(lines)
