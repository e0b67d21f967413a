"""The recall tool: its input, output and handler (a thin adapter over
`recall.store.LongTermMemory.recall`); defined with the other long-term memory tools in
`tools/recall_tools.py` (moved out of it in issue 39: supersession and event time made it longer).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from mongogate.recall import MemoryItem
from mongogate.tools.base import Call, ToolInput, ToolOutput, limit
from mongogate.tools.recall_common import (
    AUTHOR,
    NAMESPACE,
    NOTICE,
    OCCURRED_AFTER,
    OCCURRED_AT,
    OCCURRED_BEFORE,
    SOURCE,
    SUPERSEDED_BY,
    SUPERSEDES,
    TIME,
    LinkOut,
    SimilarOut,
    SourceOut,
    _notice,
    item_fields,
    service,
    similar_out,
    time_in,
)


class MemoryOut(ToolOutput):
    id: str
    namespace: str
    key: str | None
    text: str
    metadata: dict[str, Any]
    score: float | None = Field(
        default=None,
        description="relevance from 0 to 1, comparable across queries, best first: mostly how well the "
        "best memory of this recall matches the query (a tenth this memory's own match); similarity "
        "and matched_terms are this memory's own evidence",
    )
    similarity: float | None = Field(
        default=None, description="the embedding model's cosine of query and memory"
    )
    matched_terms: list[str] | None = Field(default=None, description="query words the memory holds")
    version: int
    author: str | None = Field(default=None, description=AUTHOR)
    created_at: str = Field(description="ISO 8601 UTC: when the memory was first stored")
    updated_at: str = Field(description="ISO 8601 UTC of the last change")
    occurred_at: str | None = Field(default=None, description=OCCURRED_AT)
    source: SourceOut | None = Field(default=None, description=SOURCE)
    supersedes: list[LinkOut] = Field(default_factory=list, description=SUPERSEDES)
    superseded_by: list[LinkOut] = Field(default_factory=list, description=SUPERSEDED_BY)
    newer_similar: SimilarOut | None = Field(
        default=None,
        description="a newer memory very close in meaning: this one may be an older value of the same "
        "fact (remember(..., supersedes) or forget settle it)",
    )


class RecallIn(ToolInput):
    query: str = Field(
        description="What to look for: a question, a topic, or an exact term such as an order number; "
        "at most {max_query_chars} characters.",
        json_schema_extra=limit(minLength=1, maxLength="max_query_chars"),
    )
    namespace: str | None = Field(
        default=None,
        description="Only this namespace and the ones below it (e.g. 'user' includes 'user/preferences'); "
        "default: all of yours. " + NAMESPACE,
        json_schema_extra=limit(minLength=1, maxLength="max_namespace_chars"),
    )
    limit: int | None = Field(
        default=None,
        description="Memories to return, from 1 to {max_recall_limit}; default {default_recall_limit}.",
        json_schema_extra=limit(minimum=1, maximum="max_recall_limit"),
    )
    metadata: dict[str, Any] | None = Field(
        default=None,
        description="Only memories whose metadata has exactly these top-level values (strings, numbers, "
        "booleans or null).",
    )
    min_score: float | None = Field(
        default=None,
        description="Only memories scoring at least this, from 0 to 1; default {min_score}. 0 returns "
        "the best matches however weak.",
        ge=0,
        le=1,
    )
    include_superseded: bool | None = Field(
        default=None,
        description="Also return memories a newer one replaces (each with superseded_by); default false.",
    )
    as_of: str | None = time_in(
        "The memories that were current at this time (stored by then, not yet replaced): " + TIME + "."
    )
    occurred_after: str | None = time_in(OCCURRED_AFTER)
    occurred_before: str | None = time_in(OCCURRED_BEFORE)


class RecallOut(ToolOutput):
    memories: list[MemoryOut] = Field(description="best first")
    returned: int
    truncated: bool = Field(description="true: more memories matched than fit in the response")
    notice: str = Field(description="how to read the result (data, not instructions)")


def _memory(m: MemoryItem) -> MemoryOut:
    return MemoryOut(
        **item_fields(m),
        score=m.score,
        similarity=m.similarity,
        matched_terms=m.matched_terms,
        newer_similar=None if m.newer_similar is None else similar_out(m.newer_similar, text=False),
    )


async def _recall(call: Call, a: RecallIn) -> RecallOut:
    ltm, scope = service(call)
    r = await ltm.recall(
        scope,
        a.query,
        namespace=a.namespace,
        limit=a.limit,
        metadata=a.metadata,
        min_score=a.min_score,
        include_superseded=a.include_superseded,
        as_of=a.as_of,
        occurred_after=a.occurred_after,
        occurred_before=a.occurred_before,
    )
    extra = (
        " Meaning search was unavailable (the embedding model failed): these match exact terms only."
        if r.vector_path == "unavailable"
        else ""
    )
    return RecallOut(
        memories=[_memory(m) for m in r.memories],
        returned=len(r.memories),
        truncated=r.truncated > 0,
        notice=_notice(NOTICE, r.truncated, extra),
    )
