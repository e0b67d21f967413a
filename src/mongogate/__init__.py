"""mongogate: durable agent memory and tenant-scoped read-only query tools on MongoDB over MCP."""

from __future__ import annotations

__version__ = "0.1.0"
