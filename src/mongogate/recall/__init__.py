"""Long-term memory: remember, recall and forget across sessions (no MCP; tools sit on top).

Memories are scoped by `MemoryScope` (tenant, and subject under scope "subject") and found again by
`recall` (`search.py`, the one entry of the read side): through the in-process index of the scope
(`inprocess/`, the default) or a search index (`searchindex/`), the same score on both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mongogate.indexing import OPERATORS, Compared
from mongogate.lazy import lazy_exports
from mongogate.recall.chain import MAX_SUPERSEDES
from mongogate.recall.checks import (
    MAX_ID_CHARS,
    MAX_KEY_CHARS,
    MAX_NAMESPACE_CHARS,
    MAX_NAMESPACE_DEPTH,
    MAX_SEGMENT_CHARS,
    check_metadata,
    check_metadata_filter,
    check_namespace,
)
from mongogate.recall.coherence import Coherence, read_by_id
from mongogate.recall.completion import memory_ids
from mongogate.recall.embedding import Embedder, LocalEmbedder, make_embedder
from mongogate.recall.inprocess.cache import IndexCache, IndexPolicy
from mongogate.recall.listing import PAGE_DEFAULT, PAGE_MAX
from mongogate.recall.model import (
    History,
    Link,
    MemoryItem,
    MemoryPage,
    MemoryScope,
    Recalled,
    RecallMethod,
    Remembered,
    Similar,
    Source,
    Version,
    scope_for,
)
from mongogate.recall.pages import item_json
from mongogate.recall.scope_filter import RecallFilter
from mongogate.recall.search import path_report
from mongogate.recall.searchindex.vectors import has_vector_search
from mongogate.recall.store import LongTermMemory, identity

#: read by `erase` and `mongogate memory`, or by a call, never by a start: imported at the first read
_LAZY = {
    **dict.fromkeys(
        (
            "BATCH",
            "IMPORT_AUTHOR",
            "MAX_FILE_BYTES",
            "export_lines",
            "import_lines",
            "max_line_bytes",
            "read_lines",
        ),
        "mongogate.recall.bulk",
    ),
    "ERASURE": "mongogate.recall.erase",
    #: a call's (a resource read, LangGraph's TTL sweep), never a start's
    "expired_ids": "mongogate.recall.expiry",
    "set_expiries": "mongogate.recall.expiry",
    "read_memory": "mongogate.recall.history",
    "reembed": "mongogate.recall.reembedding",
    "stale_counts": "mongogate.recall.reembedding",
}
if TYPE_CHECKING:
    from mongogate.recall.bulk import (
        BATCH,
        IMPORT_AUTHOR,
        MAX_FILE_BYTES,
        export_lines,
        import_lines,
        max_line_bytes,
        read_lines,
    )
    from mongogate.recall.erase import ERASURE
    from mongogate.recall.expiry import expired_ids, set_expiries
    from mongogate.recall.history import read_memory
    from mongogate.recall.reembedding import reembed, stale_counts
else:
    __getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "BATCH",
    "ERASURE",
    "IMPORT_AUTHOR",
    "MAX_FILE_BYTES",
    "MAX_ID_CHARS",
    "MAX_KEY_CHARS",
    "MAX_NAMESPACE_CHARS",
    "MAX_NAMESPACE_DEPTH",
    "MAX_SEGMENT_CHARS",
    "MAX_SUPERSEDES",
    "OPERATORS",
    "PAGE_DEFAULT",
    "PAGE_MAX",
    "Coherence",
    "Compared",
    "Embedder",
    "History",
    "IndexCache",
    "IndexPolicy",
    "Link",
    "LocalEmbedder",
    "LongTermMemory",
    "MemoryItem",
    "MemoryPage",
    "MemoryScope",
    "RecallFilter",
    "RecallMethod",
    "Recalled",
    "Remembered",
    "Similar",
    "Source",
    "Version",
    "check_metadata",
    "check_metadata_filter",
    "check_namespace",
    "expired_ids",
    "export_lines",
    "has_vector_search",
    "identity",
    "import_lines",
    "item_json",
    "make_embedder",
    "max_line_bytes",
    "memory_ids",
    "path_report",
    "read_by_id",
    "read_lines",
    "read_memory",
    "reembed",
    "scope_for",
    "set_expiries",
    "stale_counts",
]
