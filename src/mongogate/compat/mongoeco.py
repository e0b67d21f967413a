"""The embedded engine's internals (mongoeco 4.11; pinned by tests/test_compat.py)."""

from __future__ import annotations

from typing import Any


def open_connections(server: Any) -> int:
    """Client connections the proxy server holds open (``_connections``: no public count)."""
    return len(server._connections)
