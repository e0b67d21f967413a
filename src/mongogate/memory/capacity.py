"""What the embedded engine costs at the size its collections have reached.

mongoeco (the embedded engine) checks uniqueness over the whole collection on every insert and
runs sorted, limited finds as scans, so an `append` and a `load_context` get slower as the
collections grow; on MongoDB both stay index lookups. `mongogate check` and the server's
start-up log report the sizes and, past ``database.engine_size_warning`` documents, what those
calls now cost there (docs/DEPLOYMENT.md, "The embedded engine at size").
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pymongo.asynchronous.database import AsyncDatabase

#: (documents in `messages`, append p50 ms, load_context(40) p50 ms, raw insert_one p50 ms),
#: measured by benchmarks/memory.py on mongoeco 4.11, 2 busy cores (benchmarks/RESULTS.md "memory")
COST_CURVE: tuple[tuple[int, float, float, float], ...] = (
    (100, 49.4, 6.2, 40.0),
    (1000, 212.0, 21.5, 200.0),
    (5000, 557.0, 76.4, 585.0),
)
DEPLOYMENT = "docs/DEPLOYMENT.md (The embedded engine at size)"


@dataclass(frozen=True)
class Cost:
    append_ms: float
    load_ms: float
    insert_ms: float


def cost_at(documents: int) -> Cost:
    """The measured cost, interpolated linearly between points (and extrapolated past the last)."""
    pts = COST_CURVE
    if documents <= pts[0][0]:
        return Cost(*pts[0][1:])
    lo, hi = pts[-2], pts[-1]  # past the last point: the last segment, extended
    for a, b in itertools.pairwise(pts):
        if documents <= b[0]:
            lo, hi = a, b
            break
    f = (documents - lo[0]) / (hi[0] - lo[0])
    append, load, insert = (lo[i] + f * (hi[i] - lo[i]) for i in (1, 2, 3))
    return Cost(append, load, insert)


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
        cost = cost_at(n)
        if name == "messages":
            what = (
                f"an append now costs about {cost.append_ms:.0f} ms and a load_context(40) about "
                f"{cost.load_ms:.0f} ms there (every insert scans the collection)"
            )
        else:
            what = f"an insert into it now costs about {cost.insert_ms:.0f} ms there"
        warnings.append(
            f"collection {name!r} holds {n:,} documents (over database.engine_size_warning = {threshold:,}) "
            f"on the embedded engine: {what}; for this size use MongoDB (database.uri), see {DEPLOYMENT}"
        )
    return f"embedded engine collections: {shown}", warnings
