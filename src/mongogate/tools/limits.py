"""The values each built-in tool family's schemas are filled from (`base.fill_limits`): the stores'
own settings, the argument bounds (`tools/bounds.py`) and the stores' constants.

Here, not beside the tools, so that a server built from the stored tool declarations
(`tools/stored_tools.py`) fills their schemas without importing the tools' modules.
"""

from __future__ import annotations

from mongogate.config import LimitsSettings, MemorySettings
from mongogate.memory import MAX_QUERY_CHARS as MESSAGE_QUERY_CHARS
from mongogate.memory import MAX_TITLE_BYTES, SEARCH_DEFAULT, SEARCH_MAX
from mongogate.memory import PAGE_DEFAULT as SESSION_PAGE_DEFAULT
from mongogate.memory import PAGE_MAX as SESSION_PAGE_MAX
from mongogate.recall import (
    MAX_ID_CHARS,
    MAX_KEY_CHARS,
    MAX_NAMESPACE_CHARS,
    MAX_NAMESPACE_DEPTH,
    MAX_SEGMENT_CHARS,
    MAX_SUPERSEDES,
    PAGE_DEFAULT,
    PAGE_MAX,
)
from mongogate.runs import DEFAULT_EVENTS_LIMIT, MAX_EVENTS_LIMIT

__all__ = ["memory_limits", "recall_limits", "run_limits"]


def memory_limits(memory: MemorySettings, bounds: LimitsSettings) -> dict[str, object]:
    """The memory tools' (tools/memory_tools.py, session_tools.py): the stores' own settings and
    the argument bounds."""
    return {
        **bounds.model_dump(),
        **memory.model_dump(),
        "max_title_bytes": MAX_TITLE_BYTES,
        "page_default": SESSION_PAGE_DEFAULT,
        "page_max": SESSION_PAGE_MAX,
    }


def recall_limits(memory: MemorySettings, bounds: LimitsSettings) -> dict[str, object]:
    """The long-term memory tools' (tools/recall_tools.py): the store's own settings."""
    return {
        **bounds.model_dump(),
        "max_id_length": memory.max_id_length,  # session ids (search_messages)
        **memory.long_term.model_dump(),
        "max_namespace_depth": MAX_NAMESPACE_DEPTH,
        "max_segment_chars": MAX_SEGMENT_CHARS,
        "max_namespace_chars": MAX_NAMESPACE_CHARS,
        "max_key_chars": MAX_KEY_CHARS,
        "max_memory_id": MAX_ID_CHARS,
        "max_supersedes": MAX_SUPERSEDES,
        "page_default": PAGE_DEFAULT,
        "page_max": PAGE_MAX,
        "search_default": SEARCH_DEFAULT,
        "search_max": SEARCH_MAX,
        "message_query_chars": MESSAGE_QUERY_CHARS,
    }


def run_limits(memory: MemorySettings) -> dict[str, object]:
    """The run tools' (tools/run_tools.py): the run service's own settings."""
    return {**memory.model_dump(), "default_events": DEFAULT_EVENTS_LIMIT, "max_events": MAX_EVENTS_LIMIT}
