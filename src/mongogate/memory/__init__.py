from typing import TYPE_CHECKING

from mongogate.lazy import lazy_exports
from mongogate.memory.capacity import collection_sizes, size_report
from mongogate.memory.documents import SESSION_REVISIONS
from mongogate.memory.keys import MAX_TITLE_BYTES, ROLES, Role, check_content, check_id, message_id
from mongogate.memory.model import SUMMARY_AUTHOR, SUMMARY_NOTICE, Context, Summary, summary_shape
from mongogate.memory.search import (
    MAX_QUERY_CHARS,
    SEARCH_DEFAULT,
    SEARCH_MAX,
    Hits,
    MessageSearch,
    ensure_search_index,
)
from mongogate.memory.sessions import PAGE_DEFAULT, PAGE_MAX, retention_line, retention_seconds, session_shape
from mongogate.memory.store import MemoryStore, Message
from mongogate.memory.turns import Turns

if TYPE_CHECKING:
    from mongogate.memory.erase import ERASURE
else:  # what `erase` reads, never a started server
    __getattr__ = lazy_exports(__name__, {"ERASURE": "mongogate.memory.erase"})

__all__ = [
    "ERASURE",
    "MAX_QUERY_CHARS",
    "MAX_TITLE_BYTES",
    "PAGE_DEFAULT",
    "PAGE_MAX",
    "ROLES",
    "SEARCH_DEFAULT",
    "SEARCH_MAX",
    "SESSION_REVISIONS",
    "SUMMARY_AUTHOR",
    "SUMMARY_NOTICE",
    "Context",
    "Hits",
    "MemoryStore",
    "Message",
    "MessageSearch",
    "Role",
    "Summary",
    "Turns",
    "check_content",
    "check_id",
    "collection_sizes",
    "ensure_search_index",
    "message_id",
    "retention_line",
    "retention_seconds",
    "session_shape",
    "size_report",
    "summary_shape",
]
