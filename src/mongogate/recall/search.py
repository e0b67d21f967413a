"""`recall`: the one entry of long-term memory's read side, from the tool's arguments to a ranker.

Once per call: the arguments are checked (`checks.py`), the call's `RecallFilter` is built (scope,
namespace, metadata values, the clock's now, the event-time window, `as_of` and whether replaced
memories are shown), and `ranker_for` chooses one of two rankers, both answering the same
`Ranking` with the same `score` meaning (`mongogate/scoring.py`), `min_score` applied and
replaced memories left out by default (`recall/chain.py`):

- **the default: the in-process index of the scope** (`recall/inprocess/`), wherever no search
  index serves `$vectorSearch` (the embedded engine; MongoDB without one; `vector_search` "scan").
  The scope's memories are held in the server process (vectors as one matrix, terms scored by
  BM25), kept fresh by the scope's revision (`indexing/coherence.py`: one read by `_id` per recall,
  none on the embedded engine while its write signal says nothing was written), ranked by the
  fused score with one hop (`indexing/fusion.py`) and shown as 0.9 x the best match's score +
  0.1 x the memory's own; memories under `min_score` (`memory.long_term.min_score`, 0.065) are
  left out, so a question about something never stored returns none;
- **the search index** (`recall/searchindex/`), where the deployment has it (`vector_search`
  "atlas", or "auto" and the probe finds it): `$vectorSearch` and `$text` in the database, fused
  by reciprocal rank, scored and floored as above.

The items are then cut to the reply's byte cap (`pages.cap_items`). A recall from the tool to the
database crosses at most five modules of `recall/`: `store.py` (`LongTermMemory.recall`), this
one, the ranker (`inprocess/ranker.py`), the index cache (`inprocess/cache.py`) and the revision
protocol (`coherence.py`); the search index's path three (`store.py`, this one,
`searchindex/ranker.py`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from mongogate.recall import checks
from mongogate.recall.model import MemoryScope, Question, Ranking, Recalled, RecallMethod
from mongogate.recall.pages import cap_items
from mongogate.recall.repository import RecallRepository
from mongogate.recall.scope_filter import RecallFilter
from mongogate.recall.searchindex.vectors import has_vector_search, vector_index_definition


@dataclass(frozen=True)
class Ranker:
    """One way to rank: its name in `Recalled.index_path`, and the ranking itself."""

    index_path: str
    rank: Callable[[RecallRepository, RecallFilter, Question], Awaitable[Ranking]]


# The two rankers are imported at the first recall, not with the package: a started server answers
# `initialize`, `tools/list` and `/readyz` without them (tests/test_lazy.py; benchmarks/startup.py).


async def _in_process(store: RecallRepository, filt: RecallFilter, q: Question) -> Ranking:
    from mongogate.recall.inprocess import ranker

    return await ranker.rank(store, filt, q)


async def _search_index(store: RecallRepository, filt: RecallFilter, q: Question) -> Ranking:
    from mongogate.recall.searchindex import ranker

    return await ranker.rank(store, filt, q)


IN_PROCESS = Ranker("index", _in_process)
SEARCH_INDEX = Ranker("text", _search_index)


async def vector_path(store: RecallRepository) -> str:
    """ "vectorSearch" (a search index answers: `vector_search` "atlas", or "auto" and the probe,
    cached per process, finds it) or "scan" (the in-process index)."""
    mode = store.settings.vector_search
    if mode == "scan":
        return "scan"
    if mode == "atlas":
        return "vectorSearch"
    found = await has_vector_search(store.memories, store.settings.vector_index_name)
    return "vectorSearch" if found else "scan"


async def ranker_for(store: RecallRepository) -> Ranker:
    """The ranker of this deployment: the search index's where it answers, else the in-process
    index's (the server log says which, once)."""
    if await vector_path(store) == "scan":
        from mongogate.recall.searchindex import ranker

        ranker.log_path("index", store)
        return IN_PROCESS
    return SEARCH_INDEX


async def recall(
    store: RecallRepository,
    scope: MemoryScope,
    query: object,
    *,
    namespace: object = None,
    limit: object = None,
    metadata: object = None,
    method: RecallMethod = "fused",
    min_score: object = None,
    include_superseded: object = None,
    as_of: object = None,
    occurred_after: object = None,
    occurred_before: object = None,
) -> Recalled:
    text = checks.check_query(query, store.settings)
    n = checks.check_recall_limit(limit, store.settings)
    values = checks.check_metadata_filter(metadata, store.limits)
    floor = checks.check_min_score(min_score, store.settings)
    filt = RecallFilter.of(
        scope,
        store.clock.now(),
        namespace,
        values,
        occurred_after=occurred_after,
        occurred_before=occurred_before,
        as_of=as_of,
        include_superseded=include_superseded,
    )
    q = Question(text, n, floor, method)
    ranker = await ranker_for(store)
    found = await ranker.rank(store, filt, q)
    kept, truncated = cap_items(found.memories, store.settings.max_response_bytes)
    return Recalled(kept, found.vector_path, truncated, index_path=ranker.index_path)


async def path_report(store: RecallRepository) -> list[str]:
    """What `mongogate check` prints, and the server logs at start: which vector path runs, why,
    and the exact search index to create (it exists, or not)."""
    s = store.settings
    exists = await has_vector_search(store.memories, s.vector_index_name)
    path = await vector_path(store)
    why = {
        "scan": "the in-process index of each scope (vectors as one matrix, terms scored by BM25), "
        f"kept fresh by the scope's revision; budget {s.index_budget_mb} MB "
        "(memory.long_term.index_budget_mb), default min_score "
        f"{s.min_score} (memory.long_term.min_score)",
        "vectorSearch": f"$vectorSearch on the search index {s.vector_index_name!r}",
    }[path]
    definition = json.dumps(vector_index_definition(s, store.embedder.dimensions), sort_keys=True)
    return [
        f"long-term memory: scope {s.scope}, embedder {store.embedder.model} ({store.embedder.dimensions} "
        f"dimensions), quota {s.max_per_scope} memories per scope",
        f"long-term memory vector path: {'index' if path == 'scan' else path} "
        f"(memory.long_term.vector_search = {s.vector_search}): {why}",
        f"long-term memory vector index {s.vector_index_name!r}: {'exists' if exists else 'missing'}; "
        "the definition to create on Atlas or MongoDB Community 8.2+ (db.memories.createSearchIndex):",
        f"  {definition}",
    ]
