"""What the embedded engine costs at the size its collections have reached.

mongoeco (the embedded engine) runs sorted, limited finds and text searches as scans, so a
`load_context` gets slower as `messages` grows; on MongoDB it stays an index lookup. Inserts by a
string or ObjectId `_id` and updates by `_id` stay flat on the engine mongogate runs
(docs/decisions/engine-writes.md: 3 ms at 1,000 and at 10,000 documents), so the warning names no
write cost: it did until issue 40 ("an insert into it now costs about 252 ms"), from a curve measured
before the writes went flat. `mongogate check` and the server's start-up log report the sizes and,
past ``database.engine_size_warning`` documents, what a read costs there (docs/DEPLOYMENT.md,
"The embedded engine at size").
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pymongo.asynchronous.database import AsyncDatabase

#: (documents in `messages`, load_context(40) p50 ms), measured by benchmarks/memory.py on
#: mongoeco 4.11, 2 busy cores (benchmarks/RESULTS.md "memory"; a read: the later write changes
#: left it as it was)
LOAD_CURVE: tuple[tuple[int, float], ...] = ((100, 6.2), (1000, 21.5), (5000, 76.4))
DEPLOYMENT = "docs/DEPLOYMENT.md (The embedded engine at size)"


def load_ms_at(documents: int) -> float:
    """The measured load_context(40) cost, interpolated linearly between points (and extrapolated
    past the last)."""
    pts = LOAD_CURVE
    if documents <= pts[0][0]:
        return pts[0][1]
    lo, hi = pts[-2], pts[-1]  # past the last point: the last segment, extended
    for a, b in itertools.pairwise(pts):
        if documents <= b[0]:
            lo, hi = a, b
            break
    return lo[1] + (documents - lo[0]) / (hi[0] - lo[0]) * (hi[1] - lo[1])


async def collection_sizes(db: AsyncDatabase[Any]) -> dict[str, int]:
    """Documents per collection (estimated counts: metadata, no scan), largest first."""
    sizes = {name: await db[name].estimated_document_count() for name in await db.list_collection_names()}
    return dict(sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])))


def size_report(sizes: dict[str, int], threshold: int) -> tuple[str, list[str]]:
    """(one line of sizes, one warning per collection past ``threshold``)."""
    shown = ", ".join(f"{name} {n:,}" for name, n in sizes.items()) or "no collections yet"
    warnings = []
    for name, n in sizes.items():
        if n <= threshold:
            continue
        if name == "messages":
            what = (
                f"a load_context(40) now reads it in about {load_ms_at(n):.0f} ms (a sorted read scans "
                "the collection; appends stay flat)"
            )
        else:
            what = (
                "a sorted or text read of it scans the whole collection (inserts and updates by _id "
                "stay flat)"
            )
        warnings.append(
            f"collection {name!r} holds {n:,} documents (over database.engine_size_warning = {threshold:,}) "
            f"on the embedded engine: {what}; for this size use MongoDB (database.uri), see {DEPLOYMENT}"
        )
    return f"embedded engine collections: {shown}", warnings
