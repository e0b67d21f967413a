"""The JSON-RPC messages every benchmark client opens with (protocol 2025-06-18), said once.

The scripts that import it (startup.py, hostile.py) run with only their own folder on the path,
so they do not reach tests/helpers.py (which holds the same messages for the suite and for
benchmarks/redteam*.py, which put the checkout on the path).
"""

from __future__ import annotations

from typing import Any

INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "b", "version": "1"},
    },
}
INITIALIZED: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/initialized"}
