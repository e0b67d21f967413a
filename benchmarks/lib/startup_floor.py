"""The floor for benchmarks/startup.py: a bare SDK server with one tool, on stdio.

The same interpreter, the same SDK and the same transport as `mongogate serve`; no
configuration, no database, no policy. What a stdio `initialize` costs at the least.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("floor", log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


if __name__ == "__main__":
    server.run("stdio")
