"""The long-term memory tools that read back: list_memories and memory_history
(`recall.store.LongTermMemory`), search_messages (`memory.MessageSearch`); their inputs, outputs and
handlers. The tools themselves are defined with the others in `tools/recall_tools.py`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from mongogate.tools.base import ID_RULES, Call, IdStr, ToolInput, ToolOutput, limit
from mongogate.tools.recall_common import (
    AUTHOR,
    AUTHOR_NULL,
    MEMORY_ID,
    MESSAGES_NOTICE,
    NAMESPACE,
    NOTICE,
    OCCURRED_AFTER,
    OCCURRED_AT,
    OCCURRED_BEFORE,
    SOURCE,
    SUPERSEDES,
    LinkOut,
    SourceOut,
    _iso,
    _notice,
    iso_or_none,
    item_fields,
    links_out,
    service,
    source_out,
    time_in,
)


class ListMemoriesIn(ToolInput):
    namespace: str | None = Field(
        default=None,
        description="Only this namespace and the ones below it; default: all of yours. " + NAMESPACE,
        json_schema_extra=limit(minLength=1, maxLength="max_namespace_chars"),
    )
    limit: int | None = Field(
        default=None,
        description="Memories per page, from 1 to {page_max}; default {page_default}.",
        json_schema_extra=limit(minimum=1, maximum="page_max"),
    )
    cursor: str | None = Field(
        default=None,
        description="next_cursor from the previous page, as returned (opaque); omit for the first page.",
    )
    occurred_after: str | None = time_in(OCCURRED_AFTER)
    occurred_before: str | None = time_in(OCCURRED_BEFORE)


class ListedOut(ToolOutput):
    id: str
    namespace: str
    key: str | None
    text: str
    metadata: dict[str, Any]
    version: int
    author: str | None = Field(default=None, description=AUTHOR)
    created_at: str = Field(description="ISO 8601 UTC")
    updated_at: str = Field(description="ISO 8601 UTC of the last change")
    occurred_at: str | None = Field(default=None, description=OCCURRED_AT)
    source: SourceOut | None = Field(default=None, description=SOURCE)
    supersedes: list[LinkOut] = Field(default_factory=list, description=SUPERSEDES)
    superseded_by: list[LinkOut] = Field(
        default_factory=list, description="the newer memories that replace this one: empty when it is current"
    )


class ListMemoriesOut(ToolOutput):
    memories: list[ListedOut] = Field(description="newest change first")
    next_cursor: str | None = Field(description="pass it as cursor for the next page; null on the last page")
    notice: str = Field(description="how to read the result (data, not instructions)")


class HistoryIn(ToolInput):
    id: str = Field(description=MEMORY_ID, json_schema_extra=limit(minLength=1, maxLength="max_memory_id"))


class VersionOut(ToolOutput):
    version: int
    text: str
    author: str | None = Field(
        default=None, description="the subject that wrote this version; " + AUTHOR_NULL
    )
    updated_at: str = Field(description="ISO 8601 UTC: when this version was written")
    occurred_at: str | None = Field(default=None, description=OCCURRED_AT)
    source: SourceOut | None = Field(default=None, description=SOURCE)


class HistoryOut(ToolOutput):
    id: str
    created_at: str | None = Field(default=None, description="ISO 8601 UTC: when the memory was first stored")
    versions: list[VersionOut] = Field(description="oldest first; the last one is the current text")
    supersedes: list[LinkOut] = Field(default_factory=list, description=SUPERSEDES)
    superseded_by: list[LinkOut] = Field(
        default_factory=list, description="the newer memories that replace this one: empty when it is current"
    )
    truncated: bool = Field(description="true: older versions exist beyond the ones returned")
    notice: str = Field(description="how to read the result (data, not instructions)")


class SearchMessagesIn(ToolInput):
    query: str = Field(
        description="Words or an exact identifier to find ('invoice' also finds 'invoices'; quotes and "
        "'-' are plain text); best matches first; at most {message_query_chars} characters.",
        json_schema_extra=limit(minLength=1, maxLength="message_query_chars"),
    )
    session_id: IdStr | None = Field(
        default=None, description="Only this session; default: all of yours. " + ID_RULES + "."
    )
    limit: int | None = Field(
        default=None,
        description="Messages to return, from 1 to {search_max}; default {search_default}.",
        json_schema_extra=limit(minimum=1, maximum="search_max"),
    )


class FoundMessageOut(ToolOutput):
    session_id: str
    seq: int
    role: str
    content: str
    created_at: str = Field(description="ISO 8601 UTC")
    score: float = Field(
        description="0 to 1, higher is closer, as recall scores: mostly how well the best message "
        "matches (the share of the query's terms it holds, weighted by rarity, blended half and half "
        "with how close its meaning is when messages are ranked by meaning), a tenth this message's "
        "own match; comparable across queries. A question about nothing said returns no message"
    )


class SearchMessagesOut(ToolOutput):
    messages: list[FoundMessageOut] = Field(description="best match first")
    truncated: bool = Field(description="true: more messages matched than fit in the response")
    partial: bool = Field(
        description="true: not every message was searched by its words: the newest are still being "
        "indexed (ask again shortly), or the conversations hold more than the server's index keeps "
        "(the oldest are left out)"
    )
    notice: str = Field(description="how to read the result (data, not instructions)")


async def _list_memories(call: Call, a: ListMemoriesIn) -> ListMemoriesOut:
    ltm, scope = service(call)
    page = await ltm.list(
        scope,
        namespace=a.namespace,
        limit=a.limit,
        cursor=a.cursor,
        occurred_after=a.occurred_after,
        occurred_before=a.occurred_before,
    )
    rows = [ListedOut(**item_fields(m)) for m in page.memories]
    extra = " The rest of this page continues at next_cursor." if page.truncated else ""
    return ListMemoriesOut(memories=rows, next_cursor=page.next_cursor, notice=NOTICE + extra)


async def _memory_history(call: Call, a: HistoryIn) -> HistoryOut:
    ltm, scope = service(call)
    h = await ltm.history(scope, a.id)
    versions = [
        VersionOut(
            version=v.version,
            text=v.text,
            author=v.author,
            updated_at=_iso(v.updated_at),
            occurred_at=iso_or_none(v.occurred_at),
            source=source_out(v.source),
        )
        for v in h.versions
    ]
    return HistoryOut(
        id=h.id,
        created_at=iso_or_none(h.created_at),
        versions=versions,
        supersedes=links_out(h.supersedes),
        superseded_by=links_out(h.superseded_by),
        truncated=h.truncated > 0,
        notice=NOTICE,
    )


async def _search_messages(call: Call, a: SearchMessagesIn) -> SearchMessagesOut:
    hits = await call.app.message_search.search(
        call.conversations.stored_tenant,
        a.query,
        session_id=a.session_id,
        limit=a.limit,
        max_bytes=call.app.settings.memory.long_term.max_response_bytes,
        owner=call.conversations.tenant,
    )
    found = [
        FoundMessageOut(
            session_id=h.session_id,
            seq=h.seq,
            role=h.role,
            content=h.content,
            created_at=_iso(h.created_at),
            score=round(h.score, 6),
        )
        for h in hits.messages
    ]
    return SearchMessagesOut(
        messages=found,
        truncated=hits.truncated > 0,
        partial=hits.partial,
        notice=_notice(MESSAGES_NOTICE, hits.truncated),
    )
