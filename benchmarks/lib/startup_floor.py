"""The floor for benchmarks/startup.py: a bare SDK server with one tool, on stdio or over HTTP.

The same interpreter, the same SDK and the same transports as `mongogate serve`; no
configuration, no database, no policy. What a stdio `initialize` costs at the least, and
(``--http PORT``) what a Streamable HTTP server costs until it answers `GET /readyz` (a custom
route answering at once: the floor has nothing to be ready for).
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse

server = MCPServer("floor", log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.custom_route("/readyz", methods=["GET"])  # type: ignore[untyped-decorator]  # the SDK's
async def readyz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ready"})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
