"""The JSON-RPC messages every benchmark client opens with (protocol 2025-06-18), said once.

Benchmarks import only the package and their neighbours here, never the test suite.
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
